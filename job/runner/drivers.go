package runner

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/berth/berth/task/driver"
)

// DriverFactory makes a driver when it is first needed: the podman driver
// may start a podman service, which a job that uses only raw_exec (or
// `berth validate`) must not pay for.
type DriverFactory struct {
	New      func(ctx context.Context) (driver.Driver, error)
	Validate func(config map[string]any) error
	// ValidateUser checks a task's user on this node (it exists, it is not
	// denied); nil when the driver cannot tell before it starts (podman:
	// the image's users).
	ValidateUser func(user string) error
}

// Drivers is the set of drivers a runner can use, created lazily.
type Drivers struct {
	factories map[string]DriverFactory

	mu   sync.Mutex
	made map[string]driver.Driver
}

// NewDrivers returns a set over factories.
func NewDrivers(factories map[string]DriverFactory) *Drivers {
	return &Drivers{factories: factories, made: map[string]driver.Driver{}}
}

// Names lists the known drivers, sorted.
func (d *Drivers) Names() []string {
	out := make([]string, 0, len(d.factories))
	for n := range d.factories {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Validators maps each driver to its config validator, for jobspec.
func (d *Drivers) Validators() map[string]func(map[string]any) error {
	out := make(map[string]func(map[string]any) error, len(d.factories))
	for n, f := range d.factories {
		out[n] = f.Validate
	}
	return out
}

// UserValidators maps each driver that can check a task's user before
// starting it to its check, for jobspec.
func (d *Drivers) UserValidators() map[string]func(string) error {
	out := map[string]func(string) error{}
	for n, f := range d.factories {
		if f.ValidateUser != nil {
			out[n] = f.ValidateUser
		}
	}
	return out
}

// Get returns the driver called name, making it on first use.
func (d *Drivers) Get(ctx context.Context, name string) (driver.Driver, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if drv, ok := d.made[name]; ok {
		return drv, nil
	}
	f, ok := d.factories[name]
	if !ok {
		return nil, fmt.Errorf("%w %q; known drivers: %s", driver.ErrUnknownDriver, name, strings.Join(d.Names(), ", "))
	}
	drv, err := f.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("driver %s: %w", name, err)
	}
	d.made[name] = drv
	return drv, nil
}

// Made returns the drivers created so far.
func (d *Drivers) Made() map[string]driver.Driver {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]driver.Driver, len(d.made))
	for k, v := range d.made {
		out[k] = v
	}
	return out
}

// Close closes every driver made (stopping a podman service berth started).
func (d *Drivers) Close(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for n, drv := range d.made {
		if err := drv.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close driver %s: %w", n, err))
		}
		delete(d.made, n)
	}
	return errors.Join(errs...)
}
