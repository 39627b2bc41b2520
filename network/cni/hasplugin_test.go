package cni

import "testing"

func TestHasPlugin(t *testing.T) {
	n, err := ParseNetwork([]byte(`{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true}}]}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	if !n.HasPlugin("portmap") || !n.HasPlugin("bridge") || n.HasPlugin("firewall") {
		t.Error("HasPlugin")
	}
	one, err := ParseNetwork([]byte(`{"cniVersion": "1.0.0", "name": "one", "type": "bridge"}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	if !one.HasPlugin("bridge") || one.HasPlugin("portmap") {
		t.Error("HasPlugin of a single plugin configuration")
	}
}
