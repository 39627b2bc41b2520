package jobspec

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrInvalidJob is matched (errors.Is) by every error that Parse and
// ParseFile return because of the job file's content: syntax, unknown
// fields, bad values, failed validators and unsatisfied constraints. I/O
// errors from reading the file do not match it.
var ErrInvalidJob = errors.New("invalid job")

// Pos is a place in a job file, so later errors (from the runner, a driver)
// can point at the line that caused them.
type Pos struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// String formats the position as file:line:col, the form editors jump to.
func (p Pos) String() string {
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Diagnostic is one problem in a job file.
type Diagnostic struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Summary string `json:"summary"`
	Detail  string `json:"detail,omitempty"`
}

// Pos returns where the diagnostic points.
func (d Diagnostic) Pos() Pos { return Pos{File: d.File, Line: d.Line, Column: d.Column} }

// String is "file:line:col: summary; detail" on one line.
func (d Diagnostic) String() string {
	var b strings.Builder
	b.WriteString(d.Pos().String())
	b.WriteString(": ")
	b.WriteString(oneLine(d.Summary))
	if d.Detail != "" {
		b.WriteString("; ")
		b.WriteString(oneLine(d.Detail))
	}
	return b.String()
}

// Diagnostics is every problem found in one job file, sorted by position.
// It is the error type Parse returns for invalid jobs.
type Diagnostics []Diagnostic

// Error has one line per diagnostic.
func (ds Diagnostics) Error() string {
	lines := make([]string, len(ds))
	for i, d := range ds {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// Is makes errors.Is(err, ErrInvalidJob) true for any Diagnostics.
func (ds Diagnostics) Is(target error) bool { return target == ErrInvalidJob }

// sorted orders by position and drops repeats (a job-level block that
// every group inherits is reported once).
func (ds Diagnostics) sorted() Diagnostics {
	seen := map[Diagnostic]bool{}
	var out Diagnostics
	for _, d := range ds {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Line != out[j].Line {
			return out[i].Line < out[j].Line
		}
		return out[i].Column < out[j].Column
	})
	return out
}

// oneLine keeps Error() at one line per diagnostic even when HCL's own
// details span several.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}
