package layers

import (
	"context"
	"strings"
	"testing"
)

// Every package of the module is in a group, and every group keeps its
// rules: the whole tree at once (each group's own test checks its part).
func TestModule(t *testing.T) {
	pkgs, err := List(context.Background(), "../..", "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: is this the module root?", len(pkgs))
	}
	for _, v := range Check(pkgs) {
		t.Error(v)
	}
}

func TestCheck(t *testing.T) {
	m := Module + "/"
	for _, tc := range []struct {
		name string
		pkg  Package
		want string
	}{
		{"down is fine", Package{ImportPath: m + "job/runner", Imports: []string{m + "network/netns", m + "store", "fmt", "golang.org/x/sys/unix"}}, ""},
		{"own group", Package{ImportPath: m + "node/agent", Imports: []string{m + "node"}}, ""},
		{"up is not", Package{ImportPath: m + "network/attach", Imports: []string{m + "job/runner"}}, "network/attach imports " + m + "job/runner"},
		{"up from a test", Package{ImportPath: m + "internal/proc", XTestImports: []string{m + "network/evidence"}}, "tests import"},
		{"api is alone", Package{ImportPath: m + "api", Imports: []string{m + "store"}}, "api imports"},
		{"no group", Package{ImportPath: m + "stray"}, "is in no group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := Check([]Package{tc.pkg})
			if tc.want == "" {
				if len(vs) != 0 {
					t.Errorf("violations: %v", vs)
				}
				return
			}
			if len(vs) != 1 || !strings.Contains(vs[0].String(), tc.want) {
				t.Errorf("violations %v, want one containing %q", vs, tc.want)
			}
		})
	}
}
