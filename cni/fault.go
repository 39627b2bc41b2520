package cni

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/berth/berth/internal/fault"
)

// faultExec arms the crash point before a plugin's ADD: with
// BERTH_FAULT=before-plugin-add:firewall berth dies after the plugins
// before firewall added their part and before firewall ran.
type faultExec struct{ invoke.Exec }

func (f faultExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	for _, e := range environ {
		if e == "CNI_COMMAND=ADD" {
			fault.Point(fault.MidChainPrefix + filepath.Base(pluginPath))
		}
	}
	return f.Exec.ExecPlugin(ctx, pluginPath, stdinData, environ)
}

func withFaults(e invoke.Exec) invoke.Exec {
	if !fault.Active() || !strings.HasPrefix(os.Getenv(fault.Env), fault.MidChainPrefix) {
		return e
	}
	return faultExec{e}
}
