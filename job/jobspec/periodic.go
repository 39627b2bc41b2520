package jobspec

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/cronexpr"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Periodic is a periodic block. Crons holds every spec (cron = "..." is
// stored as a one-element list).
type Periodic struct {
	Crons           []string `json:"crons"`
	ProhibitOverlap bool     `json:"prohibit_overlap"`
	TimeZone        string   `json:"time_zone"`
	Enabled         bool     `json:"enabled"`
	Pos             Pos      `json:"pos"`

	// loc is TimeZone loaded by the parser, so Next does not read zoneinfo
	// on every call; it is nil after JSON decoding and reloaded then.
	loc *time.Location
}

// Location returns the time zone the crons are evaluated in (UTC if the
// name cannot be loaded, which Parse has already rejected).
func (p *Periodic) Location() *time.Location {
	if p.loc != nil {
		return p.loc
	}
	if loc, err := time.LoadLocation(p.TimeZone); err == nil {
		return loc
	}
	return time.UTC
}

// Next returns the earliest time after from at which any of the crons
// fires, in the periodic's time zone, or the zero time if none ever fires
// again. It ignores Enabled: the caller decides whether to launch.
func (p *Periodic) Next(from time.Time) time.Time {
	from = from.In(p.Location())
	var next time.Time
	for _, spec := range p.Crons {
		expr, err := parseCron(spec)
		if err != nil {
			continue
		}
		// A fresh Expression per call: cronexpr.Expression.Next writes to
		// the expression, so sharing one would race.
		t := cronNext(expr, from)
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next
}

// NextN returns up to n successive launch times after from.
func (p *Periodic) NextN(from time.Time, n int) []time.Time {
	out := make([]time.Time, 0, max(n, 0))
	for len(out) < n {
		t := p.Next(from)
		if t.IsZero() {
			break
		}
		out = append(out, t)
		from = t
	}
	return out
}

var (
	cronFieldRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\S+`) }) // cronexpr's own field splitter
	cronAliases = []string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@hourly"}
	errCron     = errors.New("a Nomad cron has 5 fields (min hour dom month dow), 6 (+year) or 7 (seconds first), or is one of @hourly, @daily, @weekly, @monthly, @yearly, @annually")
)

// parseCron is cronexpr.Parse, which is what Nomad uses, made strict about
// the field count (cronexpr silently drops fields past the seventh and
// rewrites "@daily" anywhere in the string) and safe from its panics.
func parseCron(spec string) (expr *cronexpr.Expression, err error) {
	defer func() {
		if r := recover(); r != nil {
			expr, err = nil, fmt.Errorf("cron parser panicked: %v", r)
		}
	}()
	trimmed := strings.TrimSpace(spec)
	if strings.Contains(trimmed, "@") {
		if !slices.Contains(cronAliases, trimmed) {
			return nil, fmt.Errorf("unknown alias or misplaced '@'")
		}
	} else if n := len(cronFieldRE().FindAllStringIndex(trimmed, -1)); n < 5 || n > 7 {
		return nil, fmt.Errorf("%d fields", n)
	}
	return cronexpr.Parse(trimmed)
}

func cronNext(expr *cronexpr.Expression, from time.Time) (t time.Time) {
	defer func() {
		if r := recover(); r != nil {
			t = time.Time{}
		}
	}()
	return expr.Next(from)
}

func (p *parser) periodic(blk *hclsyntax.Block, where string) *Periodic {
	w := "periodic block in " + where
	attrs, _ := p.content(blk.Body, schema{
		what:  w,
		attrs: []string{"cron", "crons", "prohibit_overlap", "time_zone", "enabled"},
	})
	per := &Periodic{TimeZone: "UTC", Enabled: true, Pos: p.pos(blk.TypeRange)}
	if b, ok := p.boolean(attrs["prohibit_overlap"], w); ok {
		per.ProhibitOverlap = b
	}
	if b, ok := p.boolean(attrs["enabled"], w); ok {
		per.Enabled = b
	}
	loc := time.UTC
	if a := attrs["time_zone"]; a != nil {
		if tz, ok := p.str(a, w); ok {
			l, err := time.LoadLocation(tz)
			if err != nil || tz == "" {
				p.fail(a.Expr.Range(), fmt.Sprintf("invalid time_zone %q in %s", tz, w),
					"use an IANA zone name such as \"UTC\", \"Europe/Berlin\" or \"America/New_York\"")
			} else {
				per.TimeZone, loc = tz, l
			}
		}
	}
	per.loc = loc

	ca, csa := attrs["cron"], attrs["crons"]
	switch {
	case ca != nil && csa != nil:
		p.fail(csa.NameRange, fmt.Sprintf("%s sets both cron and crons", w), "put every spec in crons = [\"...\"]")
		return per
	case ca == nil && csa == nil:
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no cron", w), "write crons = [\"*/15 * * * *\"]")
		return per
	case ca != nil:
		if s, ok := p.str(ca, w); ok {
			p.checkCron(s, ca.Expr.Range(), loc)
			per.Crons = []string{s}
		}
	default:
		if l, ok := p.strList(csa, w); ok {
			if len(l) == 0 {
				p.fail(csa.Expr.Range(), fmt.Sprintf("crons in %s is empty", w), "list at least one cron spec")
			}
			for i, s := range l {
				p.checkCron(s, rangeOfElement(csa, i), loc)
			}
			per.Crons = l
		}
	}
	return per
}

func (p *parser) checkCron(spec string, r hcl.Range, loc *time.Location) {
	expr, err := parseCron(spec)
	if err != nil {
		p.fail(r, fmt.Sprintf("invalid cron %q: %v", spec, err), errCron.Error())
		return
	}
	if cronNext(expr, p.now.In(loc)).IsZero() {
		p.fail(r, fmt.Sprintf("cron %q never fires after %s", spec, p.now.In(loc).Format(time.RFC3339)),
			"check the day of month, month and year fields")
	}
}
