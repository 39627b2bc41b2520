// Package layers holds berth's import rules: the groups of packages, from
// the bottom up, and which groups each may import. A group's folder has a
// doc.go saying the same in words and a test that calls Check; this
// package's own test checks that every package of the module is in a
// group, so that a new package cannot slip past the rules.
package layers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// Module is berth's module path.
const Module = "github.com/berth/berth"

// A Group is a folder of packages and the groups they may import, besides
// their own group, the standard library and third-party modules.
type Group struct {
	Dir string // relative to the module root: "network", "internal", "api"
	May []string
}

// Groups are berth's layers, from the bottom up. A group may import only
// groups listed before it (and only those named in May): no arrow runs
// back up.
func Groups() []Group {
	foundations := []string{"internal", "api", "store"}
	return []Group{
		{Dir: "internal", May: []string{"internal"}},
		{Dir: "api"}, // the wire contract: the standard library only
		{Dir: "store", May: []string{"internal"}},
		{Dir: "network", May: foundations},
		{Dir: "task", May: append([]string{"network"}, foundations...)},
		{Dir: "job", May: append([]string{"task", "network"}, foundations...)},
		{Dir: "node", May: append([]string{"job", "task", "network"}, foundations...)},
		{Dir: "cli", May: []string{"node", "job", "task", "network", "internal", "api", "store"}},
		// Entry points and the suites that test the whole: anything.
		{Dir: "cmd", May: []string{"cli", "node", "job", "task", "network", "internal", "api", "store"}},
		{Dir: "examples", May: []string{"cli", "node", "job", "task", "network", "internal", "api", "store"}},
		{Dir: "scripts", May: []string{"cli", "node", "job", "task", "network", "internal", "api", "store"}},
	}
}

// GroupOf is the group a package (import path) is in, or "" if none.
func GroupOf(pkg string) string {
	rel, ok := strings.CutPrefix(pkg, Module+"/")
	if !ok {
		return ""
	}
	for _, g := range Groups() {
		if rel == g.Dir || strings.HasPrefix(rel, g.Dir+"/") {
			return g.Dir
		}
	}
	return ""
}

// A Violation is an import a group's rules forbid.
type Violation struct {
	Pkg, Imports string
	Test         bool // only a test file imports it
}

func (v Violation) String() string {
	what := "imports"
	if v.Test {
		what = "tests import"
	}
	return fmt.Sprintf("%s %s %s (group %s may import %s)", v.Pkg, what, v.Imports, GroupOf(v.Pkg), strings.Join(may(GroupOf(v.Pkg)), ", "))
}

func may(group string) []string {
	for _, g := range Groups() {
		if g.Dir == group {
			return append([]string{group}, g.May...)
		}
	}
	return nil
}

// A Package is what `go list` says of one package.
type Package struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// List runs `go list` on the packages under dir (a pattern such as
// "./..." relative to dir).
func List(ctx context.Context, dir, pattern string) ([]Package, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports", pattern)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s in %s: %w: %s", pattern, dir, err, strings.TrimSpace(stderr.String()))
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list %s in %s: %w", pattern, dir, err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// Check lists the imports of pkgs that their groups' rules forbid. A
// package of the module in no group is a violation too.
func Check(pkgs []Package) []Violation {
	var out []Violation
	for _, p := range pkgs {
		g := GroupOf(p.ImportPath)
		if g == "" {
			out = append(out, Violation{Pkg: p.ImportPath, Imports: "(is in no group: add it to layers.Groups)"})
			continue
		}
		allowed := map[string]bool{}
		for _, a := range may(g) {
			allowed[a] = true
		}
		check := func(imps []string, test bool) {
			for _, imp := range imps {
				ig := GroupOf(imp)
				if strings.HasPrefix(imp, Module+"/") && !allowed[ig] && !strings.HasPrefix(imp, p.ImportPath) {
					out = append(out, Violation{Pkg: p.ImportPath, Imports: imp, Test: test})
				}
			}
		}
		check(p.Imports, false)
		check(append(append([]string{}, p.TestImports...), p.XTestImports...), true)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// TestDir is a group's TestLayer: it fails t with each import of the
// packages under the current directory that the rules forbid.
func TestDir(t testing.TB) {
	t.Helper()
	pkgs, err := List(context.Background(), ".", "./...")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Check(pkgs) {
		t.Error(v)
	}
}
