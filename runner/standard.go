package runner

import (
	"context"
	"log/slog"

	"github.com/berth/berth/driver"
	execdrv "github.com/berth/berth/driver/exec"
	"github.com/berth/berth/driver/podman"
)

// StandardOptions configure the drivers berth ships.
type StandardOptions struct {
	// PodmanSocket is a podman service's socket; empty lets the driver
	// start its own under DataDir when none answers.
	PodmanSocket string
	DataDir      string
	Logger       *slog.Logger
}

// StandardDrivers is the set berth ships: raw_exec, exec and podman. The
// podman driver (and any podman service) is created only when a task
// needs it.
func StandardDrivers(o StandardOptions) *Drivers {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return NewDrivers(map[string]DriverFactory{
		execdrv.NameRawExec: {
			New: func(context.Context) (driver.Driver, error) {
				return execdrv.NewRawExec(execdrv.Options{Logger: log}), nil
			},
			Validate: execdrv.NewRawExec(execdrv.Options{Logger: log}).ValidateConfig,
		},
		execdrv.NameExec: {
			New: func(context.Context) (driver.Driver, error) {
				return execdrv.NewExec(execdrv.Options{Logger: log}), nil
			},
			Validate: execdrv.NewExec(execdrv.Options{Logger: log}).ValidateConfig,
		},
		podman.Name: {
			New: func(ctx context.Context) (driver.Driver, error) {
				return podman.New(ctx, podman.Options{Socket: o.PodmanSocket, DataDir: o.DataDir, Logger: log})
			},
			Validate: func(cfg map[string]any) error { _, err := podman.ParseConfig(cfg); return err },
		},
	})
}
