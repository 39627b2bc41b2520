package cni

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/berth/berth/internal/fault"
)

// faultExec arms the crash point before a plugin's ADD or DEL: with
// BERTH_FAULT=before-plugin-add:firewall berth dies after the plugins
// before firewall added their part and before firewall ran; with
// before-plugin-del:portmap, after the plugins after portmap (DEL runs
// the chain in reverse) deleted theirs.
type faultExec struct{ invoke.Exec }

func (f faultExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	for _, e := range environ {
		switch e {
		case "CNI_COMMAND=ADD":
			fault.Point(fault.MidChainPrefix + filepath.Base(pluginPath))
		case "CNI_COMMAND=DEL":
			fault.Point(fault.MidDelPrefix + filepath.Base(pluginPath))
		}
	}
	return f.Exec.ExecPlugin(ctx, pluginPath, stdinData, environ)
}

func withFaults(e invoke.Exec) invoke.Exec {
	v := os.Getenv(fault.Env)
	if !fault.Active() || !strings.HasPrefix(v, fault.MidChainPrefix) && !strings.HasPrefix(v, fault.MidDelPrefix) {
		return e
	}
	return faultExec{e}
}
