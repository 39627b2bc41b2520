package hostclean

import (
	"reflect"
	"testing"
)

func TestSplitRule(t *testing.T) {
	cases := []struct {
		line string
		want []string
	}{
		{`-A POSTROUTING -s 10.199.0.2/32 -m comment --comment "name: \"private\" id: \"a-1\"" -j CNI-abc`,
			[]string{"-A", "POSTROUTING", "-s", "10.199.0.2/32", "-m", "comment", "--comment", `name: "private" id: "a-1"`, "-j", "CNI-abc"}},
		{`-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD`,
			[]string{"-A", "FORWARD", "-m", "comment", "--comment", "CNI firewall plugin rules", "-j", "CNI-FORWARD"}},
		{`-A X  -j   Y`, []string{"-A", "X", "-j", "Y"}},
	}
	for _, tc := range cases {
		got, err := splitRule(tc.line)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitRule(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
	if _, err := splitRule(`-A X --comment "open`); err == nil {
		t.Error("unbalanced quote accepted")
	}
}

func TestJumpTargetAndMarker(t *testing.T) {
	if got := jumpTarget(`-A POSTROUTING -s 1.2.3.4/32 -j CNI-x`); got != "CNI-x" {
		t.Errorf("jumpTarget = %q", got)
	}
	if got := AttachmentMarker("n", "i"); got != `name: \"n\" id: \"i\"` {
		t.Errorf("marker %q", got)
	}
	if !sharedChain("CNI-HOSTPORT-DNAT") || sharedChain("CNI-DN-123") {
		t.Error("sharedChain")
	}
}
