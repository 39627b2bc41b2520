package hostlocal

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFromPlugins(t *testing.T) {
	c := FromPlugins("n", [][]byte{
		[]byte(`{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.199.9.0/24"}],[{"subnet":"fd00::/64"}]]}}`),
		[]byte(`{"type":"other","ipam":{"type":"host-local","dataDir":"/x","subnet":"10.199.8.0/24"}}`),
		[]byte(`{"type":"portmap"}`),
		[]byte(`not json`),
	})
	if len(c.Dirs) != 2 || c.Dirs[0] != filepath.Join(DefaultDir, "n") || c.Dirs[1] != "/x/n" {
		t.Errorf("dirs %v", c.Dirs)
	}
	if len(c.Subnets) != 3 {
		t.Errorf("subnets %v", c.Subnets)
	}
	if n, ok := c.Contains(parseName("10.199.9.7")); !ok || n.String() != "10.199.9.0/24" {
		t.Errorf("Contains: %v %v", n, ok)
	}
}

func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"10.199.9.2":         "ctr-a\r\neth0",
		"10.199.9.3":         "ctr-b",
		"fd00::5":            "ctr-c\r\neth1",
		"lock":               "",
		"last_reserved_ip.0": "10.199.9.3",
		"10.199.9.9":         "",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range ls {
		got[l.IP.String()] = l.ID + "/" + l.IfName
	}
	want := map[string]string{"10.199.9.2": "ctr-a/eth0", "10.199.9.3": "ctr-b/", "fd00::5": "ctr-c/eth1"}
	if len(got) != len(want) {
		t.Fatalf("leases %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("lease %s = %q, want %q", k, got[k], v)
		}
	}
	if ls, err := ReadDir(filepath.Join(dir, "missing")); err != nil || ls != nil {
		t.Errorf("missing dir: %v %v", ls, err)
	}
}
