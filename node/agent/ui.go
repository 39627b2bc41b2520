package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/network/attach"
	"github.com/berth/berth/node/ui"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// uiSource is what the status page (package ui) reads of the agent, in
// the API's wire types, converted where the API converts them.
type uiSource struct{ a *Agent }

var _ ui.Source = uiSource{}

func (s uiSource) Self(ctx context.Context) (*api.AgentSelf, error) { return s.a.self(ctx) }

func (s uiSource) Jobs(ctx context.Context) ([]api.JobStub, error) { return s.a.listJobs(ctx) }

func (s uiSource) Job(ctx context.Context, id string) (*api.JobStatus, error) {
	st, err := s.a.jobStatus(ctx, id)
	return st, uiErr(err)
}

func (s uiSource) Allocations(ctx context.Context, job string) ([]api.Allocation, error) {
	allocs, err := s.a.node.Store.ListAllocations(ctx, store.AllocFilter{JobID: job})
	if err != nil {
		return nil, err
	}
	out := make([]api.Allocation, 0, len(allocs))
	for _, al := range allocs {
		out = append(out, *wireAlloc(al))
	}
	return out, nil
}

func (s uiSource) Allocation(ctx context.Context, id string) (*api.Allocation, error) {
	al, err := s.a.findAlloc(ctx, id)
	if err != nil {
		return nil, uiErr(err)
	}
	return s.a.allocWithServices(ctx, al), nil
}

func (s uiSource) Namespaces(ctx context.Context) ([]api.NetnsEntry, error) {
	list, err := attach.ListNamespaces(ctx, s.a.node.Attach)
	if err != nil {
		return nil, err
	}
	return WireNamespaces(list), nil
}

// LogTail reads the end of the task's log (its files
// <data_dir>/alloc/<id>/alloc/logs/<task>.<stream>.N), as GET
// /v1/allocation/{id}/logs/{task} serves it: the task must be one of the
// allocation's, so nothing from the request reaches the path unchecked,
// and every file is opened by logfile.OpenLog, as the API's.
func (s uiSource) LogTail(ctx context.Context, allocID, task, stream string, max int64) ([]byte, error) {
	if stream != "stdout" && stream != "stderr" {
		return nil, fmt.Errorf("log stream %q: use stdout or stderr", stream)
	}
	al, err := s.a.findAlloc(ctx, allocID)
	if err != nil {
		return nil, uiErr(err)
	}
	known := false
	for _, t := range al.Tasks {
		known = known || t.Name == task
	}
	if !known {
		return nil, fmt.Errorf("allocation %s has no task %q: %w", al.ID, task, ui.ErrNotFound)
	}
	name := task + "." + stream
	b, err := logfile.ReadTail(ctx, driver.LogDir(filepath.Join(s.a.node.Config.AllocDir(), al.ID)), name, max)
	if errors.Is(err, logfile.ErrUnsafe) {
		// The page says so instead of showing it: the API answers 403.
		return nil, fmt.Errorf("the %s log of task %s is not the file berth's log writer made (a link, or another owner's): not shown", stream, task)
	}
	if err != nil {
		return nil, uiErr(err)
	}
	return b, nil
}

// uiErr marks what the API answers 404 (or 400 for a malformed ID) as
// the status page's not found.
func uiErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrJobNotFound) || errors.Is(err, store.ErrNotFound) || errors.Is(err, os.ErrNotExist) ||
		errors.Is(err, ErrInvalidName) || errors.Is(err, errBadRequest) {
		return fmt.Errorf("%w: %w", ui.ErrNotFound, err)
	}
	return err
}

// newUI makes the status page over this agent, and the history it plots.
func (a *Agent) newUI() {
	a.hist = ui.NewHistory()
	a.uiPage = ui.New(ui.Options{Source: uiSource{a}, History: a.hist, Logger: a.log.With("component", "ui")})
}

// recordAlloc adds an allocation that ended to the status page's history.
func (a *Agent) recordAlloc(al *store.Allocation) { a.hist.RecordAlloc(time.Now(), wireAlloc(al)) }
