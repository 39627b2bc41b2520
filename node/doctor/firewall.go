package doctor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// CheckFirewall checks that iptables and ip6tables run, and which backend
// (nf_tables or legacy) they use: the bridge plugin's ipMasq, portmap and
// firewall all call them.
func CheckFirewall(ctx context.Context, run Runner) []Check {
	return []Check{
		checkIPTables(ctx, run, "iptables", StatusFail, "the bridge plugin's ipMasq, portmap and firewall need it"),
		checkIPTables(ctx, run, "ip6tables", StatusWarn, "plugins skip or fail their IPv6 rules without it"),
	}
}

func checkIPTables(ctx context.Context, run Runner, tool string, missing Status, why string) Check {
	c := Check{Name: "firewall/" + tool}
	res, err := run(ctx, nil, tool, "--version")
	if err != nil {
		c.Status = missing
		if errors.Is(err, exec.ErrNotFound) {
			c.Message = fmt.Sprintf("%s not found: %s", tool, why)
		} else {
			c.Message = fmt.Sprintf("%s --version: %v: %s", tool, err, why)
		}
		c.Fix = "apt-get install iptables"
		return c
	}
	out := firstLine(res.Stdout)
	if res.ExitCode != 0 {
		c.Status = missing
		c.Message = fmt.Sprintf("%s --version exited with %d: %s", tool, res.ExitCode, firstLine(res.Stderr))
		c.Fix = "apt-get install --reinstall iptables"
		return c
	}
	c.Status, c.Message = StatusOK, out
	if !strings.Contains(out, "(nf_tables)") && !strings.Contains(out, "(legacy)") {
		// Versions before 1.8 print no backend: they only have legacy.
		c.Message += " (legacy backend)"
	}
	return c
}
