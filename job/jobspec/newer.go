package jobspec

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Blocks of the job specification of Nomad releases after 1.6.5, read
// beside 1.6.5's: checked as the newer Nomad checks them and warned about
// where they mean nothing on one node.

// taskIdentities reads a task's identity blocks. Nomad 1.6.5 allows one,
// with env and file; Nomad 1.7 allows several, named, each an identity
// for another service (Vault, Consul, an OIDC provider).
func taskIdentities(p *parser, s *scope, f field) {
	seen := map[string]*Identity{}
	for _, b := range f.blocks {
		id := p.identity(b, s.where)
		name := id.Name
		if name == "" {
			name = "default"
		}
		if first := seen[name]; first != nil {
			p.fail(b.TypeRange, fmt.Sprintf("duplicate identity %q in %s", name, s.where),
				fmt.Sprintf("identity names must be unique in a task (only one may omit name); the first is at %s", first.Pos))
			continue
		}
		seen[name] = id
		if name == "default" {
			s.task.Identity = id
		} else {
			s.task.Identities = append(s.task.Identities, id)
		}
	}
}

var identityAttrs = []string{"env", "file", "name", "aud", "filepath", "ttl", "change_mode", "change_signal"}

func (p *parser) identity(blk *hclsyntax.Block, where string) *Identity {
	w := "identity block in " + where
	attrs, _ := p.content(blk.Body, schema{what: w, attrs: identityAttrs})
	id := &Identity{Pos: p.pos(blk.TypeRange)}
	if b, ok := p.boolean(attrs["env"], w); ok {
		id.Env = b
	}
	if b, ok := p.boolean(attrs["file"], w); ok {
		id.File = b
	}
	if v, ok := p.str(attrs["name"], w); ok {
		if v == "" {
			p.fail(attrs["name"].Expr.Range(), fmt.Sprintf("%s has an empty name", w), "omit name for the default identity")
		}
		id.Name = v
	}
	if v, ok := p.strList(attrs["aud"], w); ok {
		id.Audience = v
	}
	if v, ok := p.str(attrs["filepath"], w); ok {
		id.FilePath = v
	}
	if v, ok := p.duration(attrs["ttl"], w); ok {
		id.TTL = v
	}
	if v, ok := p.str(attrs["change_signal"], w); ok {
		id.ChangeSignal = v
	}
	p.oneOf(attrs["change_mode"], w, &id.ChangeMode, "noop", "restart", "signal")
	if id.ChangeMode == "signal" && id.ChangeSignal == "" {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has change_mode \"signal\" and no change_signal", w), "")
	}
	detail := "berth issues no workload identities: nothing gets a token (no NOMAD_TOKEN, no token file)"
	for _, a := range identityAttrs[2:] {
		if attrs[a] != nil {
			detail += "; " + a + " is newer Nomad's (1.7+), which Nomad 1.6.5 refuses"
			break
		}
	}
	p.warn(blk.TypeRange, fmt.Sprintf("identity in %s is accepted and ignored", where), detail)
	return id
}

// taskSchedule reads a task's schedule block: time based task execution,
// Nomad Enterprise's (1.9+). berth does not keep a task to its window, so
// the block is a warning: the task runs whenever its allocation does.
func taskSchedule(p *parser, s *scope, f field) {
	blk := f.blocks[0]
	w := "schedule block in " + s.where
	_, blocks := p.content(blk.Body, schema{what: w, blocks: []blockSpec{{name: "cron", single: true}}})
	crons := blocks["cron"]
	if len(crons) == 0 {
		p.fail(blk.TypeRange, fmt.Sprintf("%s has no cron block", w), "write cron { start = \"30 9 * * MON-FRI *\" end = \"0 16\" }")
		return
	}
	cw := "cron block in " + w
	attrs, _ := p.content(crons[0].Body, schema{what: cw, attrs: []string{"start", "end", "timezone"}})
	sch := &Schedule{Pos: p.pos(blk.TypeRange)}
	for _, req := range []struct {
		name   string
		fields int
		at     *string
	}{{"start", 6, &sch.Start}, {"end", 2, &sch.End}} {
		a := attrs[req.name]
		if a == nil {
			p.fail(crons[0].TypeRange, fmt.Sprintf("%s has no %s", cw, req.name), "")
			continue
		}
		if v, ok := p.str(a, cw); ok {
			if msg := scheduleCronProblem(v, req.fields, req.name == "end"); msg != "" {
				p.fail(a.Expr.Range(), fmt.Sprintf("invalid %s %q in %s: %s", req.name, v, cw, msg), "")
			}
			*req.at = v
		}
	}
	if v, ok := p.str(attrs["timezone"], cw); ok {
		if _, err := time.LoadLocation(v); err != nil {
			p.fail(attrs["timezone"].Expr.Range(), fmt.Sprintf("unknown timezone %q in %s", v, cw), "write an IANA name such as \"Europe/Paris\", or \"Local\"")
		}
		sch.Timezone = v
	}
	s.task.Schedule = sch
	p.warn(blk.TypeRange, fmt.Sprintf("schedule in %s is accepted and not applied", s.where),
		"it is Nomad Enterprise's time based task execution (Nomad 1.9+; 1.6.5 refuses it): berth runs the task outside the window too")
}

// scheduleCronProblem checks a schedule's cron text: n fields without
// "," or "/" (start: minute hour day-of-month month day-of-week year;
// end: minute hour, both numbers).
func scheduleCronProblem(v string, n int, numeric bool) string {
	fields := strings.Fields(v)
	switch {
	case len(fields) != n:
		return fmt.Sprintf("want %d fields, got %d", n, len(fields))
	case strings.ContainsAny(v, ",/"):
		return "\",\" and \"/\" are not allowed"
	case !numeric:
		return ""
	}
	for i, max := range []int{59, 23} {
		x, err := strconv.Atoi(fields[i])
		if err != nil || x < 0 || x > max {
			return fmt.Sprintf("field %d must be a number from 0 to %d, got %q", i+1, max, fields[i])
		}
	}
	return ""
}
