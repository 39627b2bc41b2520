package nomadapi_test

import (
	"regexp"
	"testing"
)

// TestNomadCLINodeStatus: `nomad node status` lists this one node, ready
// and eligible; -self and -verbose show its attributes, drivers and
// allocations.
func TestNomadCLINodeStatus(t *testing.T) {
	e := startNomadEnv(t, jobsNet, jobsBridge)
	f := e.jobFile(t, "batch.nomad.hcl", batchJob)
	_, code := e.nomad(t, "job", "run", f)
	wantExit(t, "job run", code, 0)

	out, code := e.nomad(t, "node", "status")
	wantExit(t, "node status", code, 0)
	want(t, "node status", out, `ID\s+Node Pool\s+DC\s+Name\s+Class\s+Drain\s+Eligibility\s+Status`, `[0-9a-f]{8}\s+default\s+dc1\s+\S+\s+<none>\s+false\s+eligible\s+ready`)

	id := regexp.MustCompile(`\n([0-9a-f]{8})\s+default`).FindStringSubmatch(out)[1]
	out, code = e.nomad(t, "status", id[:6])
	wantExit(t, "status <node prefix>", code, 0)
	want(t, "status <node prefix>", out, `Status\s+= ready`)

	out, code = e.nomad(t, "node", "status", "-self")
	wantExit(t, "node status -self", code, 0)
	want(t, "node status -self", out, `Status\s+= ready`, `Driver Status\s+= .*raw_exec`, `Allocations`, `nbatch|g\s+0\s+run`)

	out, code = e.nomad(t, "node", "status", "-self", "-verbose")
	wantExit(t, "node status -self -verbose", code, 0)
	want(t, "node status -verbose", out, `Attributes`, `kernel.name\s+= linux`, `driver.raw_exec\s+= 1`, `nomad.version\s+= 1.6.5`)
}
