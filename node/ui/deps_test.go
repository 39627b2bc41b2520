package ui

import (
	"go/build"
	"strings"
	"testing"
)

// The page renders from the API's wire types: besides the standard
// library it imports package api only, never berth's records (store,
// attach, runner), so that what it shows is what the API says.
func TestImportsOnlyAPI(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		first, _, _ := strings.Cut(imp, "/")
		if strings.Contains(first, ".") && imp != "github.com/berth/berth/api" {
			t.Errorf("ui imports %s: it may import the standard library and github.com/berth/berth/api only", imp)
		}
	}
}
