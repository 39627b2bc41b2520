package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
	"github.com/berth/berth/task/driver/docker"
	execdrv "github.com/berth/berth/task/driver/exec"
	"github.com/berth/berth/task/driver/podman"
)

// newDrivers registers the drivers berth ships, raw_exec, exec, podman
// and docker, each made when a task (or gc) first needs it: the podman driver
// may start a podman service, which a job that uses only raw_exec (or
// `berth validate`) must not pay for. raw_exec and exec mark their tasks
// (supervisors, cgroups) with the data dir's store ID, so that a berth
// re-attaches and sweeps only its own; the tasks block gives them their
// settings, and raw_exec is left out when it is disabled.
func newDrivers(cfg *Config, log *slog.Logger, secrets []string) *runner.Drivers {
	t := cfg.Tasks
	if t == nil {
		t = DefaultTasks()
	}
	opts := func(name string) execdrv.Options {
		o := execdrv.Options{
			Logger:           log,
			StoreID:          store.IDFor(cfg.DataDir),
			ChrootEnv:        t.ChrootEnv,
			Secrets:          secrets,
			AllowCaps:        t.AllowCaps,
			AllowHostPIDMode: t.AllowHostPIDMode,
			AllowHostIPCMode: t.AllowHostIPCMode,
			NoSeccomp:        !t.ExecSeccomp,
			DeniedUsers:      []string{},
		}
		if slices.Contains(t.UserCheckedDrivers, name) {
			o.DeniedUsers = append([]string{}, t.UserDenylist...)
		}
		return o
	}
	podmanPolicy := podman.Policy{AllowPrivileged: cfg.PodmanAllowPrivileged, AllowCaps: t.AllowCaps}
	dockerPolicy := docker.Policy{AllowPrivileged: cfg.DockerAllowPrivileged, AllowCaps: t.AllowCaps}
	rawExec, exec := execdrv.NewRawExec(opts(execdrv.NameRawExec)), execdrv.NewExec(opts(execdrv.NameExec))
	f := map[string]runner.DriverFactory{
		execdrv.NameRawExec: {
			New:          func(context.Context) (driver.Driver, error) { return rawExec, nil },
			Validate:     rawExec.ValidateConfig,
			ValidateUser: rawExec.ValidateUser,
		},
		execdrv.NameExec: {
			New:          func(context.Context) (driver.Driver, error) { return exec, nil },
			Validate:     exec.ValidateConfig,
			ValidateUser: exec.ValidateUser,
		},
		podman.Name: {
			New: func(ctx context.Context) (driver.Driver, error) {
				return podman.New(ctx, podman.Options{Socket: cfg.PodmanSocket, DataDir: cfg.DataDir, Logger: log, Policy: podmanPolicy})
			},
			Validate: podmanPolicy.ValidateConfig,
		},
		docker.Name: {
			New: func(ctx context.Context) (driver.Driver, error) {
				return docker.New(ctx, docker.Options{Endpoint: cfg.DockerEndpoint, DataDir: cfg.DataDir, Logger: log,
					Policy: dockerPolicy, PauseImage: cfg.DockerPauseImage})
			},
			Validate: dockerPolicy.ValidateConfig,
		},
	}
	if !t.RawExecEnabled {
		delete(f, execdrv.NameRawExec)
	}
	return runner.NewDrivers(f)
}

// lent is a driver of the node's set lent to gc, which closes the drivers
// it opens: the node closes its own, once.
type lent struct{ driver.Driver }

func (lent) Close(context.Context) error { return nil }

// Unwrap is the lent driver, for what it is beyond driver.Driver
// (driver.Sweeper: gc's task sweep).
func (l lent) Unwrap() driver.Driver { return l.Driver }

// driverHint says what to install or configure for a driver a job names
// and this node does not have: raw_exec when its setting disables it,
// another runtime for Nomad's drivers berth does not ship, and for a
// plugin, that berth loads none.
func driverHint(name string) string {
	switch name {
	case execdrv.NameRawExec:
		return `raw_exec is disabled on this node: set raw_exec_enabled = true in the tasks block of the agent's config`
	case "java":
		return `berth has no java driver: install a JRE and run the jar with exec or raw_exec (command = "java", args = ["-jar", "local/app.jar"])`
	case "qemu":
		return `berth has no qemu driver: install qemu and run it with exec or raw_exec (command = "qemu-system-x86_64")`
	}
	return fmt.Sprintf("berth loads no task driver plugins, so %q cannot be installed on it: run the task with exec, raw_exec or podman, or on a Nomad client that has the plugin", name)
}
