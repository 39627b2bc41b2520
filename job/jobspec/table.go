package jobspec

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// verdict is what berth does with a key, as the README's table says.
type verdict string

const (
	// runs: the runner acts on it.
	runs verdict = "runs"
	// placement: checked against this node; run refuses a job it excludes.
	placement verdict = "placement"
	// parsed: checked and kept in the Job; the runner does not act on it yet.
	parsed verdict = "parsed"
	// ignored: checked as Nomad checks it and accepted with a warning; it
	// means nothing on one node or needs a service berth has not.
	ignored verdict = "warning"
)

// form is how a key may be written.
type form int

const (
	attrForm   form = 1 << iota // name = value
	blockForm                   // name { ... }
	eitherForm = attrForm | blockForm
)

// field is one key as the body wrote it: its attribute or its blocks
// (one at most for a single block), in source order.
type field struct {
	attr   *hclsyntax.Attribute
	blocks []*hclsyntax.Block
}

// row is one key a job, group or task body may hold. The bodies are read
// by walking a table of rows (jobKeys, groupKeys, taskKeys): each row names one attribute or block
// Nomad allows there, what berth does with it (its verdict, which the
// README's key table states and TestREADMEJobKeys checks), and the handler
// that checks it and stores it in the Job. Anything not in the table is an
// error at its file:line:col (content does that), so a row is also what
// makes a key accepted.
//
// Adding a Nomad key is one row in the table of each body that may hold it:
//
//   - a plain attribute stored in a field: strKey, boolKey, intKey or
//     durKey with the field's accessor, e.g.
//     durKey("shutdown_delay", runs, (*scope).shutdownDelay);
//   - a block checked but meaning nothing on one node: a shape (see
//     cluster.go) and a row whose handler is ignoredBlock(shape, why);
//   - anything else: a row with a handler func(p *parser, s *scope, f field)
//     that reads f.attr or f.blocks and writes s.job, s.group or s.task.
//
// A block allowed in several bodies (constraint, affinity, spread, update,
// migrate, meta, restart, vault, service, shutdown_delay) is one row value
// shared by those tables; its handler finds its target through the scope
// (s.constraints(), s.meta(), ...). Rows run in table order, which is the
// order of evaluation: a row may read what an earlier one set (affinity
// reads the job's type; config reads the driver). After adding a row, give
// it a sample in keySamples (keys_test.go: TestKeyVerdicts parses it and,
// for a "warning" verdict, checks the warning) and run
// `go test ./job/jobspec -run TestREADMEJobKeys -update` to regenerate the
// README's key table.
//
// The blocks nested in these bodies (restart, network, resources, ...)
// are read by their own functions, each with a schema, or, when berth only
// checks them, by a shape.
type row struct {
	name    string
	form    form
	label   string // a block's label ("" for none), for messages
	single  bool   // at most one block
	verdict verdict
	// always runs the handler when the key is absent too: required keys,
	// and checks of a default.
	always bool
	// handle checks the key and stores it; nil when the body's own code
	// reads it (a job's groups, in source order with its tasks).
	handle func(p *parser, s *scope, f field)
}

// scope is the body being walked and what its rows write to.
type scope struct {
	where  string // "job \"web\"", "group \"g\"", ... for messages
	blk    *hclsyntax.Block
	attrs  map[string]*hclsyntax.Attribute
	blocks map[string][]*hclsyntax.Block
	job    *Job
	group  *Group // nil in the job's body
	task   *Task  // nil outside a task's body
	// idRange is where the job's ID was written (its label or id).
	idRange hcl.Range
	// vault is the job's or the group's vault block, which tasks inherit.
	vault *Vault
	// canary is the update block's canary count, nil when not set.
	canary *int
}

// walk checks blk's body against rows and runs each row's handler, in
// table order.
func (p *parser) walk(rows []row, s *scope) {
	sc := schema{what: s.where}
	for _, r := range rows {
		if r.form&attrForm != 0 {
			sc.attrs = append(sc.attrs, r.name)
		}
		if r.form&blockForm != 0 {
			sc.blocks = append(sc.blocks, blockSpec{name: r.name, label: r.label, single: r.single})
		}
	}
	s.attrs, s.blocks = p.content(s.blk.Body, sc)
	for _, r := range rows {
		f := field{attr: s.attrs[r.name], blocks: s.blocks[r.name]}
		if r.handle == nil || (!r.always && f.attr == nil && len(f.blocks) == 0) {
			continue
		}
		r.handle(p, s, f)
	}
}

// The fields that rows shared by several bodies write.

func (s *scope) constraints() *[]Constraint {
	switch {
	case s.task != nil:
		return &s.task.Constraints
	case s.group != nil:
		return &s.group.Constraints
	}
	return &s.job.Constraints
}

func (s *scope) meta() *map[string]string {
	switch {
	case s.task != nil:
		return &s.task.Meta
	case s.group != nil:
		return &s.group.Meta
	}
	return &s.job.Meta
}

func (s *scope) restart() *RestartPolicy {
	if s.task != nil {
		return &s.task.Restart
	}
	return &s.group.Restart
}

func (s *scope) services() *[]*Service {
	if s.task != nil {
		return &s.task.Services
	}
	return &s.group.Services
}

func (s *scope) shutdownDelay() *time.Duration {
	if s.task != nil {
		return &s.task.ShutdownDelay
	}
	return &s.group.ShutdownDelay
}

func (s *scope) vaultSlot() **Vault {
	if s.task != nil {
		return &s.task.Vault
	}
	return &s.vault
}

// Rows of plain attributes: key → field, with the type check.

func strKey(name string, v verdict, at func(*scope) *string) row {
	return row{name: name, form: attrForm, verdict: v, handle: func(p *parser, s *scope, f field) {
		if x, ok := p.str(f.attr, s.where); ok {
			*at(s) = x
		}
	}}
}

func boolKey(name string, v verdict, at func(*scope) *bool) row {
	return row{name: name, form: attrForm, verdict: v, handle: func(p *parser, s *scope, f field) {
		if x, ok := p.boolean(f.attr, s.where); ok {
			*at(s) = x
		}
	}}
}

func intKey(name string, lo, hi int64, v verdict, at func(*scope) *int) row {
	return row{name: name, form: attrForm, verdict: v, handle: func(p *parser, s *scope, f field) {
		if x, ok := p.integer(f.attr, s.where, lo, hi); ok {
			*at(s) = x
		}
	}}
}

func durKey(name string, v verdict, at func(*scope) *time.Duration) row {
	return row{name: name, form: attrForm, verdict: v, handle: func(p *parser, s *scope, f field) {
		if x, ok := p.duration(f.attr, s.where); ok {
			*at(s) = x
		}
	}}
}

// Rows shared by the job, group and task tables.
var (
	metaRow = row{name: "meta", form: eitherForm, single: true, verdict: runs, handle: func(p *parser, s *scope, _ field) {
		if m, r, ok := p.stringMap("meta", s.attrs, s.blocks, s.where); ok {
			p.checkMetaKeys(r, m, s.where)
			*s.meta() = m
		}
	}}
	constraintRow = row{name: "constraint", form: blockForm, verdict: placement, handle: func(p *parser, s *scope, f field) {
		for _, b := range f.blocks {
			if c, ok := p.constraint(b, s.where, s.task != nil); ok {
				*s.constraints() = append(*s.constraints(), c)
			}
		}
	}}
	// Nomad refuses affinity and spread in a system job's job and group
	// bodies; a task's affinity is not checked against the job's type.
	affinityRow = row{name: "affinity", form: blockForm, verdict: ignored, handle: func(p *parser, s *scope, f field) {
		for _, b := range f.blocks {
			if s.task == nil && s.job.Type == TypeSystem {
				p.fail(b.TypeRange, fmt.Sprintf("system job %q may not have an affinity block", s.job.ID), "")
			}
			p.affinity(b, s.where)
		}
	}}
	spreadRow = row{name: "spread", form: blockForm, verdict: ignored, handle: func(p *parser, s *scope, f field) {
		for _, b := range f.blocks {
			if s.job.Type == TypeSystem {
				p.fail(b.TypeRange, fmt.Sprintf("system job %q may not have a spread block", s.job.ID), "")
			}
			p.spread(b, s.where)
		}
	}}
	updateRow = row{name: "update", form: blockForm, single: true, verdict: ignored, handle: func(p *parser, s *scope, f field) {
		p.checkUpdateAllowed(f.blocks[0], s.job)
		s.canary = p.update(f.blocks[0], s.where)
	}}
	migrateRow = row{name: "migrate", form: blockForm, single: true, verdict: ignored, handle: func(p *parser, s *scope, f field) {
		p.checkMigrateAllowed(f.blocks[0], s.job)
		p.migrate(f.blocks[0], s.where)
	}}
	restartRow = row{name: "restart", form: blockForm, single: true, verdict: runs, handle: func(p *parser, s *scope, f field) {
		// A task's policy starts from its group's, which Nomad merges in.
		*s.restart() = p.restart(f.blocks[0], s.group.Restart, s.where)
	}}
	vaultRow = row{name: "vault", form: blockForm, single: true, verdict: ignored, handle: func(p *parser, s *scope, f field) {
		*s.vaultSlot() = p.vault(f.blocks[0], s.where)
	}}
	serviceRow = row{name: "service", form: blockForm, verdict: runs, handle: func(p *parser, s *scope, f field) {
		task := ""
		if s.task != nil {
			task = s.task.Name
		}
		for _, b := range f.blocks {
			*s.services() = append(*s.services(), p.service(b, s.where, task))
		}
	}}
	shutdownDelayRow = durKey("shutdown_delay", runs, (*scope).shutdownDelay)
)

// ignoredBlock is the handler of a single block berth checks against sh
// and accepts with a warning that it does not apply on one node.
func ignoredBlock(sh *shape, why string) func(p *parser, s *scope, f field) {
	return func(p *parser, s *scope, f field) {
		p.check(f.blocks[0], sh, f.blocks[0].Type+" block in "+s.where)
		p.clusterOnly(f.blocks[0], s.where, why)
	}
}
