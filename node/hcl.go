package node

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/berth/berth/internal/hcllimit"
)

// DecodeHCL reads an HCL file into parts: pointers to structs whose
// fields carry hcl tags (gohcl's; see decodeBody), such as a program's own settings and
// the node's Config it embeds, which share the file's top level. What the
// file leaves out keeps the value it has in parts (the defaults). A
// setting no part has, a wrong type or bad syntax is an error naming
// file:line:col.
func DecodeHCL(src []byte, filename string, parts ...any) error {
	// The parser recurses per nesting level: a file nested 100,000 deep
	// would overflow the stack of a root agent before it says anything.
	if d := hcllimit.Check(src, filename, false); d.HasErrors() {
		return diagError(d)
	}
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return diagError(diags)
	}
	// One struct of every part's fields, so that the file is checked
	// against all of them at once: an unknown name is reported once, with
	// a suggestion from any part.
	type ref struct {
		part reflect.Value
		i    int
	}
	var fields []reflect.StructField
	var refs []ref
	seen := map[string]bool{}
	for _, p := range parts {
		v := reflect.ValueOf(p).Elem()
		for i := 0; i < v.NumField(); i++ {
			sf := v.Type().Field(i)
			tag := sf.Tag.Get("hcl")
			if tag == "" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if seen[name] {
				panic(fmt.Sprintf("node: two parts define the setting %q", name))
			}
			seen[name] = true
			fields = append(fields, reflect.StructField{Name: fmt.Sprintf("F%d", len(fields)), Type: sf.Type, Tag: sf.Tag})
			refs = append(refs, ref{v, i})
		}
	}
	all := reflect.New(reflect.StructOf(fields)).Elem()
	for i, r := range refs {
		all.Field(i).Set(r.part.Field(r.i))
	}
	if diags := decodeBody(f.Body, all); diags.HasErrors() {
		return diagError(diags)
	}
	for i, r := range refs {
		r.part.Field(r.i).Set(all.Field(i))
	}
	return nil
}

// diagError is one line per error, each starting with file:line:col.
func diagError(diags hcl.Diagnostics) error {
	var lines []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		s := d.Summary
		if d.Detail != "" {
			s += "; " + strings.Join(strings.Fields(d.Detail), " ")
		}
		if d.Subject != nil {
			s = fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, s)
		}
		lines = append(lines, s)
	}
	return errors.New(strings.Join(lines, "\n"))
}
