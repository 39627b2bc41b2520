package nomad

import (
	"context"
	"fmt"
	"time"

	"github.com/berth/berth/node/doctor"
)

// Check is `berth doctor`'s view of the Nomad connection: the settings,
// the client agent and its node, the node's allocations, the event
// stream. Each failure says what to fix.
func Check(ctx context.Context, cfg Config) []doctor.Check {
	const name = "nomad"
	fail := func(msg, fix string) []doctor.Check {
		return []doctor.Check{{Name: name, Status: doctor.StatusFail, Message: msg, Fix: fix}}
	}
	s, err := cfg.Check()
	if err != nil {
		return fail(err.Error(), "fix the --nomad-* flags or NOMAD_* variables")
	}
	c, err := NewClient(s, nil)
	if err != nil {
		return fail(err.Error(), "fix the --nomad-* flags or NOMAD_* variables")
	}
	node, err := c.Self(ctx)
	if err != nil {
		return fail(err.Error(), "point --nomad-address or NOMAD_ADDR at this node's Nomad client agent, with a token allowed agent:read (NOMAD_TOKEN), and --nomad-data-dir at its data_dir")
	}
	checks := []doctor.Check{{Name: name, Status: doctor.StatusOK,
		Message: fmt.Sprintf("%s is Nomad %s, the client agent of this node (%s, %s), served by pid %d which holds the client state in %s; CNI config dir %s, bridge %s (%s)",
			c.Address(), node.Version, node.ID, node.Name, node.Host.PID, node.StateDir, node.CNIConfigDir, node.BridgeName, node.BridgeSubnet)}}
	allocs, _, err := c.NodeAllocations(ctx, node.ID)
	if err != nil {
		return append(checks, fail(err.Error(), "give the token node:read (NOMAD_TOKEN)")...)
	}
	running := 0
	for _, a := range allocs {
		if !a.Terminal() {
			running++
		}
	}
	checks = append(checks, doctor.Check{Name: name, Status: doctor.StatusOK,
		Message: fmt.Sprintf("the node has %d allocations Nomad knows, %d of them not terminal", len(allocs), running)})
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := c.Follow(sctx, 0); err != nil {
		return append(checks, doctor.Check{Name: name, Status: doctor.StatusWarn, Message: err.Error(),
			Fix: "give the token read-job in every namespace (the agent follows allocation events); `berth gc --nomad` works without"})
	}
	checks = append(checks, doctor.Check{Name: name, Status: doctor.StatusOK, Message: "the allocation event stream answers (namespace " + s.Namespace + ")"})
	return checks
}
