package jobspec

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"

	"github.com/berth/berth/internal/hcllimit"
)

// CheckSource refuses, before anything parses it, a job file that is
// empty or only white space, that is not UTF-8, or that is too large or
// nested too deeply (hcllimit): with a positioned Diagnostics error, nil
// when src passes. Parse runs it first; a client that sends a file to
// the agent runs it too, so these errors point into the file (JSON would
// turn invalid bytes into U+FFFD on the way).
func CheckSource(src []byte, filename string) error {
	if filename == "" {
		filename = "<input>"
	}
	at := func(line, col int, summary, detail string) error {
		return Diagnostics{{File: filename, Line: line, Column: col, Summary: summary, Detail: detail}}
	}
	if strings.TrimSpace(string(src)) == "" {
		what := "the job file is empty"
		if len(src) > 0 {
			what = "the job file holds only white space"
		}
		return at(1, 1, what, `a job file holds one job "<id>" { ... } block`)
	}
	if !utf8.Valid(src) {
		line, col := 1, 1
		for i := 0; i < len(src); {
			r, n := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && n <= 1 {
				return at(line, col, fmt.Sprintf("invalid UTF-8 (byte 0x%02x at offset %d)", src[i], i),
					"job files are UTF-8 text; save the file as UTF-8")
			}
			if r == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
			i += n
		}
	}
	if d := hcllimit.Check(src, filename, false); d.HasErrors() {
		var out Diagnostics
		for _, e := range d {
			r := hcl.Range{Filename: filename, Start: hcl.InitialPos}
			if e.Subject != nil {
				r = *e.Subject
			}
			out = append(out, Diagnostic{File: filename, Line: r.Start.Line, Column: r.Start.Column, Summary: e.Summary, Detail: e.Detail})
		}
		return out
	}
	return nil
}
