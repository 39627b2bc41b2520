package node

import (
	"context"
	"log/slog"

	"github.com/berth/berth/driver"
	execdrv "github.com/berth/berth/driver/exec"
	"github.com/berth/berth/driver/podman"
	"github.com/berth/berth/runner"
)

// newDrivers registers the drivers berth ships, raw_exec, exec and
// podman, each made when a task (or gc) first needs it: the podman driver
// may start a podman service, which a job that uses only raw_exec (or
// `berth validate`) must not pay for.
func newDrivers(podmanSocket, dataDir string, log *slog.Logger) *runner.Drivers {
	return runner.NewDrivers(map[string]runner.DriverFactory{
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
				return podman.New(ctx, podman.Options{Socket: podmanSocket, DataDir: dataDir, Logger: log})
			},
			Validate: func(c map[string]any) error { _, err := podman.ParseConfig(c); return err },
		},
	})
}

// lent is a driver of the node's set lent to gc, which closes the drivers
// it opens: the node closes its own, once.
type lent struct{ driver.Driver }

func (lent) Close(context.Context) error { return nil }
