package jobspec

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
)

// nodeRefuses ends the detail of a node fact validate warns about.
const nodeRefuses = "the file is a valid Nomad job, but run and plan refuse it on this node"

// nodeFact reports at r what only this node decides (ParseOptions.
// NodeWarnings): an error whose detail, fix, says what to install or
// configure, or for validate a warning that run refuses the job.
func (p *parser) nodeFact(r hcl.Range, summary, fix string) {
	p.nodeFactAt(p.pos(r), summary, fix)
}

// nodeFactAt is nodeFact at a position already taken.
func (p *parser) nodeFactAt(pos Pos, summary, fix string) {
	if !p.opts.NodeWarnings {
		p.failAt(pos, summary, fix)
		return
	}
	detail := nodeRefuses
	if fix != "" {
		detail = fix + "; " + nodeRefuses
	}
	p.warnAt(pos, summary, detail)
}

// missingDriver is the fix for a driver this node does not have: the
// node's hint, then its drivers.
func (p *parser) missingDriver(name string) string {
	known := p.knownDrivers("this node's drivers: ")
	hint := ""
	if p.opts.DriverHint != nil {
		hint = p.opts.DriverHint(name)
	}
	switch {
	case hint == "":
		return known
	case known == "":
		return hint
	}
	return fmt.Sprintf("%s (%s)", hint, known)
}
