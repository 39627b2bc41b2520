package runner

import (
	"context"
	"log/slog"
	"slices"

	"github.com/berth/berth/driver"
	execdrv "github.com/berth/berth/driver/exec"
	"github.com/berth/berth/driver/podman"
	"github.com/berth/berth/store"
)

// StandardOptions configure the drivers berth ships.
type StandardOptions struct {
	// PodmanSocket is a podman service's socket; empty lets the driver
	// start its own under DataDir when none answers.
	PodmanSocket string
	DataDir      string
	Logger       *slog.Logger
	// Tasks are the raw_exec and exec drivers' node settings (chroot_env,
	// allow_caps, host PID/IPC modes, user denylist); their Logger and
	// StoreID are filled in here.
	Tasks execdrv.Options
	// UserCheckedDrivers are the drivers Tasks.DeniedUsers applies to (nil
	// Tasks.DeniedUsers: execdrv.DefaultDeniedUsers); nil means exec only,
	// as Nomad's user.checked_drivers.
	UserCheckedDrivers []string
	// DisableRawExec leaves raw_exec out (Nomad's raw_exec "enabled" =
	// false): a job that uses it is refused at validation.
	DisableRawExec bool
}

// StandardDrivers is the set berth ships: raw_exec, exec and podman. The
// podman driver (and any podman service) is created only when a task
// needs it.
func StandardDrivers(o StandardOptions) *Drivers {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	eo := o.Tasks
	eo.Logger = log
	if eo.StoreID == "" {
		dataDir := o.DataDir
		if dataDir == "" {
			dataDir = execdrv.DefaultDataDir
		}
		eo.StoreID = store.IDFor(dataDir)
	}
	checked := o.UserCheckedDrivers
	if checked == nil {
		checked = []string{execdrv.NameExec}
	}
	denied := eo.DeniedUsers
	if denied == nil {
		denied = execdrv.DefaultDeniedUsers
	}
	per := func(name string) execdrv.Options {
		po := eo
		po.DeniedUsers = []string{}
		if slices.Contains(checked, name) {
			po.DeniedUsers = denied
		}
		return po
	}
	rawExec, exec := execdrv.NewRawExec(per(execdrv.NameRawExec)), execdrv.NewExec(per(execdrv.NameExec))
	f := map[string]DriverFactory{
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
				return podman.New(ctx, podman.Options{Socket: o.PodmanSocket, DataDir: o.DataDir, Logger: log})
			},
			Validate: func(cfg map[string]any) error { _, err := podman.ParseConfig(cfg); return err },
		},
	}
	if o.DisableRawExec {
		delete(f, execdrv.NameRawExec)
	}
	return NewDrivers(f)
}
