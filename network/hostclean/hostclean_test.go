package hostclean

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/network/cni"
	"github.com/berth/berth/network/evidence"
)

// The rules and chains the tests make are gone when they end.
func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

// Rules is what CNI DEL is given on a real host.
var _ cni.RuleRemover = Rules{}

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

func TestSharedChain(t *testing.T) {
	if !sharedChain("CNI-HOSTPORT-DNAT") || sharedChain("CNI-DN-123") {
		t.Error("sharedChain")
	}
}

// A marked jump to a chain whose own rules carry no marker (portmap's
// CNI-DN-<hash>): both go.
func TestRemoveAttachmentRulesUnmarkedChain(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	chain := "CNI-DN-bthc" + suffix
	network, id := "bthc-net", "bthc-"+suffix
	comment := fmt.Sprintf("dnat name: %q id: %q", network, id)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("iptables", append([]string{"-w", "-t", "nat"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %v: %v %s", args, err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("iptables", "-w", "-t", "nat", "-D", "OUTPUT", "-m", "comment", "--comment", comment, "-j", chain).Run()
		_ = exec.Command("iptables", "-w", "-t", "nat", "-F", chain).Run()
		_ = exec.Command("iptables", "-w", "-t", "nat", "-X", chain).Run()
	})
	run("-N", chain)
	run("-A", chain, "-p", "tcp", "--dport", "29999", "-j", "DNAT", "--to-destination", "10.199.96.2:80")
	run("-A", "OUTPUT", "-m", "comment", "--comment", comment, "-j", chain)

	removed, err := RemoveAttachmentRules(ctx, network, id)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("iptables-save", "-t", "nat").Output()
	if strings.Contains(string(out), chain) {
		t.Errorf("chain %s or its jump remains (removed %v):\n%s", chain, removed, out)
	}
	if len(removed) != 2 {
		t.Errorf("removed %v, want the jump and the chain", removed)
	}
}

// RemoveLease removes a lease only while it names the holder it was read
// with (host-local may have handed the address on meanwhile).
func TestRemoveLease(t *testing.T) {
	cases := []struct {
		name    string
		content string // "" = no file
		holder  string
		gone    bool
	}{
		{"same holder", "ctr-a\r\neth0", "ctr-a", true},
		{"handed to another", "ctr-b\r\neth0", "ctr-a", false},
		{"already gone", "", "ctr-a", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "10.199.117.5")
			if tc.content != "" {
				if err := os.WriteFile(p, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			l := evidence.Lease{Path: p, Dir: dir, IP: net.ParseIP("10.199.117.5"), ID: tc.holder, IfName: "eth0"}
			if err := RemoveLease(context.Background(), l); err != nil {
				t.Fatal(err)
			}
			_, err := os.Stat(p)
			if gone := errors.Is(err, os.ErrNotExist); gone != tc.gone {
				t.Errorf("lease gone = %v, want %v", gone, tc.gone)
			}
		})
	}
}
