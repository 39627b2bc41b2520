// Package drivercfg is the one mechanism the task drivers use to read a
// task's `config` block: a table of keys, each with what the driver does
// with it (its verdict) and how it is decoded and checked. The driver walks
// its table; a key no row names is unknown. Adding a driver key is adding
// a row, and the README's key tables are checked against the same rows.
package drivercfg

import (
	"fmt"
	"sort"
	"strings"
)

// Verdict is what a driver does with a key it knows.
type Verdict int

const (
	// Runs: the driver acts on the key.
	Runs Verdict = iota + 1
	// Accepted: the key is decoded and checked, and not acted on (Why
	// says why): a job written for Nomad still validates.
	Accepted
	// Deprecated: the key works, with a warning (Why is the warning).
	Deprecated
	// Refused: the key is an error (Why is the reason).
	Refused
)

func (v Verdict) String() string {
	switch v {
	case Runs:
		return "runs"
	case Accepted:
		return "accepted, not acted on"
	case Deprecated:
		return "works, with a warning"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Reporter is the driver's decoder as the walk sees it: where Deprecated
// and Refused rows report.
type Reporter interface {
	// Warn reports a Deprecated key that is present.
	Warn(key, why string)
	// Refuse reports a Refused key that is present.
	Refuse(key, why string)
}

// Key is one row: a config key, its verdict and its decoding.
type Key[D Reporter] struct {
	Name    string
	Verdict Verdict
	// Why explains a verdict other than Runs (and may qualify Runs); it is
	// the README's note and, for Deprecated and Refused, the message.
	Why string
	// Set decodes key's value into the task config d builds and checks it,
	// reporting problems through d. It runs whether the key is present or
	// not (a required key reports its absence); nil for Refused rows.
	Set func(d D, key string)
}

// Run is a row the driver acts on.
func Run[D Reporter](name string, set func(d D, key string)) Key[D] {
	return Key[D]{Name: name, Verdict: Runs, Set: set}
}

// Note adds a qualification to a row, shown in the README.
func (k Key[D]) Note(why string) Key[D] {
	k.Why = why
	return k
}

// Accept is a row decoded and checked but not acted on, for the reason why.
func Accept[D Reporter](name, why string, set func(d D, key string)) Key[D] {
	return Key[D]{Name: name, Verdict: Accepted, Why: why, Set: set}
}

// Deprecate is a row that works with the warning why.
func Deprecate[D Reporter](name, why string, set func(d D, key string)) Key[D] {
	return Key[D]{Name: name, Verdict: Deprecated, Why: why, Set: set}
}

// Refuse is a row that is an error, for the reason why.
func Refuse[D Reporter](name, why string) Key[D] {
	return Key[D]{Name: name, Verdict: Refused, Why: why}
}

// Table is a driver's config keys, in the order their problems are
// reported.
type Table[D Reporter] []Key[D]

// Walk runs every row against cfg, in table order, and returns the keys
// of cfg no row names, sorted, for the driver to report in its words.
func (t Table[D]) Walk(d D, cfg map[string]any) (unknown []string) {
	for _, k := range t {
		_, present := cfg[k.Name]
		switch {
		case k.Verdict == Refused:
			if present {
				d.Refuse(k.Name, k.Why)
			}
			continue
		case k.Verdict == Deprecated && present:
			d.Warn(k.Name, k.Why)
		}
		if k.Set != nil {
			k.Set(d, k.Name)
		}
	}
	for name := range cfg {
		if !t.has(name) {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	return unknown
}

func (t Table[D]) has(name string) bool {
	for _, k := range t {
		if k.Name == name {
			return true
		}
	}
	return false
}

// Order lists the table's keys in table order.
func (t Table[D]) Order() []string {
	out := make([]string, 0, len(t))
	for _, k := range t {
		out = append(out, k.Name)
	}
	return out
}

// Names lists the table's keys, sorted.
func (t Table[D]) Names() []string {
	out := make([]string, 0, len(t))
	for _, k := range t {
		out = append(out, k.Name)
	}
	sort.Strings(out)
	return out
}

// Row is a key as the README shows it.
type Row struct {
	Name    string
	Verdict Verdict
	Why     string
}

// Rows is the table as the README shows it, sorted by key.
func (t Table[D]) Rows() []Row {
	out := make([]Row, 0, len(t))
	for _, k := range t {
		out = append(out, Row{Name: k.Name, Verdict: k.Verdict, Why: k.Why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Markdown renders rows as the README's table of a driver's keys.
func Markdown(rows []Row) string {
	var b strings.Builder
	b.WriteString("| key | verdict | why |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.Name, r.Verdict, strings.ReplaceAll(r.Why, "|", `\|`))
	}
	return b.String()
}
