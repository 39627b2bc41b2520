package runner

import (
	"context"
	"log/slog"
	"time"

	"github.com/berth/berth/attach"
	"github.com/berth/berth/cni"
	"github.com/berth/berth/jobspec"
)

// TidyJobNetworks removes what the job's networks leave on the host by
// design (bridge, host-local dir, shared chains) once berth has no
// attachment on them, so that a finished or stopped job leaves the host
// as it found it. Failures are logged: they leave harmless state behind.
func TidyJobNetworks(ctx context.Context, m *attach.Manager, job *jobspec.Job, bridge BridgeConfig, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if log == nil {
		log = slog.Default()
	}
	seen := map[string]bool{}
	for _, g := range job.Groups {
		mode := g.Network.Mode
		if seen[mode] || mode == "" || mode == jobspec.NetworkHost || mode == jobspec.NetworkNone {
			continue
		}
		seen[mode] = true
		var net *cni.Network
		var err error
		if mode == jobspec.NetworkBridge {
			net, err = bridge.ConfList()
		} else {
			net, err = cni.LoadNetwork(ctx, m.ConfDir(), g.Network.CNI)
		}
		if err == nil {
			_, err = m.TidyNetwork(ctx, net)
		}
		if err != nil {
			log.Warn("could not tidy network after the job", "job", job.ID, "network", mode, "err", err)
		}
	}
}
