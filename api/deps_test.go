package api

import (
	"go/build"
	"os/exec"
	"strings"
	"testing"
)

// A client links this package and the standard library only: no other
// berth package (libcni, netlink, bbolt and the drivers would come with
// them) and nothing from outside the standard library.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("api imports %s: the wire package may import only the standard library", imp)
		}
	}

	// The same through the go command, transitively, when it is there.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Log("no go command: checked the direct imports only")
		return
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/berth/berth/api" {
			t.Errorf("api depends on %s: the wire package may depend on the standard library only", p)
		}
	}
}
