package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/node/nomadapi"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// The Nomad API's allocations: the same allocations, controls, logs and
// exec as berth's own routes (alloc.go), in Nomad's terms.

// nomadErr keeps err's message and makes it one of nomadapi's sentinel
// errors, for its status code.
type nomadErr struct {
	err, kind error
}

func (e *nomadErr) Error() string        { return e.err.Error() }
func (e *nomadErr) Unwrap() error        { return e.err }
func (e *nomadErr) Is(target error) bool { return target == e.kind }

// toNomadErr classifies the agent's errors as nomadapi's.
func toNomadErr(err error) error {
	if err == nil {
		return nil
	}
	var kind error
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, ErrJobNotFound), errors.Is(err, os.ErrNotExist), errors.Is(err, runner.ErrNoSuchTask):
		kind = nomadapi.ErrNotFound
	case errors.Is(err, ErrInvalidName), errors.Is(err, errBadRequest), errors.Is(err, runner.ErrNotSupported):
		kind = nomadapi.ErrBadRequest
	case errors.Is(err, runner.ErrAllocNotRunning), errors.Is(err, runner.ErrTaskNotRunning):
		kind = nomadapi.ErrConflict
	default:
		return err
	}
	return &nomadErr{err, kind}
}

// allocInfo is an allocation with its job, as nomadapi describes it.
func (b nomadBackend) allocInfo(al *store.Allocation, wire *api.Allocation) nomadapi.AllocInfo {
	a := b.a
	attrs := a.node.Attrs
	ai := nomadapi.AllocInfo{
		Alloc: wire, NodeID: nodeUUID(attrs["node.unique.id"]), NodeName: attrs["node.unique.name"],
		Datacenter: attrs["node.datacenter"],
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range []string{al.JobID, al.ParentJobID} {
		if jr := a.jobs[id]; id != "" && jr != nil && jr.job != nil {
			ai.Job = wireJob(jr.job)
			break
		}
	}
	return ai
}

func (b nomadBackend) Allocs(ctx context.Context, prefix string) ([]nomadapi.AllocInfo, error) {
	l, err := b.a.node.Store.ListAllocations(ctx, store.AllocFilter{})
	if err != nil {
		return nil, err
	}
	// Nomad's list is newest first.
	slices.SortStableFunc(l, func(x, y *store.Allocation) int { return y.CreatedAt.Compare(x.CreatedAt) })
	var mine []*store.Allocation
	for _, al := range l {
		if strings.HasPrefix(al.ID, prefix) {
			mine = append(mine, al)
		}
	}
	// With their services: a service job's allocation is healthy once
	// they pass, as in the job's list of them.
	wires, err := b.withServices(ctx, mine)
	if err != nil {
		return nil, err
	}
	out := make([]nomadapi.AllocInfo, 0, len(mine))
	for i, al := range mine {
		out = append(out, b.allocInfo(al, wires[i]))
	}
	return out, nil
}

func (b nomadBackend) Alloc(ctx context.Context, id string) (nomadapi.AllocInfo, error) {
	al, err := b.a.findAlloc(ctx, id)
	if err != nil {
		return nomadapi.AllocInfo{}, toNomadErr(err)
	}
	return b.allocInfo(al, b.a.allocWithServices(ctx, al)), nil
}

func (b nomadBackend) StopAlloc(ctx context.Context, id string) error {
	a := b.a
	al, err := a.findAlloc(ctx, id)
	if err != nil {
		return toNomadErr(err)
	}
	if _, err := a.runner.StopAlloc(al.ID); err != nil {
		return toNomadErr(err)
	}
	a.log.Info("stopping allocation (operator, nomad API)", "alloc_id", al.ID, "job", al.JobID)
	return nil
}

func (b nomadBackend) RestartAlloc(ctx context.Context, id, task string) error {
	a := b.a
	al, err := a.findAlloc(ctx, id)
	if err != nil {
		return toNomadErr(err)
	}
	if task != "" {
		if err := validName("task", task); err != nil {
			return toNomadErr(err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, a.set.stopTimeout)
	defer cancel()
	tasks, err := a.runner.RestartAlloc(ctx, al.ID, task)
	if err != nil && len(tasks) == 0 {
		return toNomadErr(err)
	}
	a.log.Info("restarted tasks (operator, nomad API)", "alloc_id", al.ID, "tasks", strings.Join(tasks, ","))
	return nil
}

func (b nomadBackend) SignalAlloc(ctx context.Context, id, task, signal string) error {
	a := b.a
	al, err := a.findAlloc(ctx, id)
	if err != nil {
		return toNomadErr(err)
	}
	if task != "" {
		if err := validName("task", task); err != nil {
			return toNomadErr(err)
		}
	}
	if signal == "" {
		signal = "SIGKILL"
	}
	sig, ok := parseSignal(signal)
	if !ok {
		return &nomadErr{fmt.Errorf("invalid signal %q: use a name (SIGUSR1, USR1) or a number", signal), nomadapi.ErrBadRequest}
	}
	tasks, err := a.runner.SignalAlloc(ctx, al.ID, task, sig)
	if err != nil && len(tasks) == 0 {
		return toNomadErr(err)
	}
	a.log.Info("signalled tasks (operator, nomad API)", "alloc_id", al.ID, "signal", signal, "tasks", strings.Join(tasks, ","))
	return nil
}

// AllocLogs serves a task's log as berth's logs route does (the same
// files, opened as safely), from where Nomad's origin and offset say.
func (b nomadBackend) AllocLogs(ctx context.Context, req nomadapi.LogsRequest, out nomadapi.LogSink) error {
	a := b.a
	al, err := a.findAlloc(ctx, req.AllocID)
	if err != nil {
		return toNomadErr(err)
	}
	if !slices.ContainsFunc(al.Tasks, func(t store.TaskState) bool { return t.Name == req.Task }) {
		return &nomadErr{fmt.Errorf("unknown task name %q in allocation %s", req.Task, al.ID), nomadapi.ErrBadRequest}
	}
	lq := logQuery{typ: req.Type, follow: req.Follow}
	switch {
	case req.Origin == "end" && req.Offset == 0:
		// The end itself: nothing of what is there.
		lq.from = 1 << 62
	case req.Origin == "end":
		lq.tail = req.Offset
	default:
		lq.from = req.Offset
	}
	dead := a.taskDead(al.ID, req.Task)
	pos, err := a.taskLogStart(ctx, al, req.Task, lq, dead)
	if err != nil {
		return toNomadErr(err)
	}
	dir, name := driver.LogDir(filepath.Join(a.cfg.AllocDir(), al.ID)), req.Task+"."+req.Type
	// Nomad names a log file by its place in the alloc dir.
	rel := filepath.Join("alloc", "logs", name)
	out.File(rel+"."+strconv.Itoa(pos.Index), pos.Offset)
	o := logfile.FollowOptions{
		Flush:  out.Flush,
		OnFile: func(index int, offset int64) { out.File(rel+"."+strconv.Itoa(index), offset) },
	}
	if req.Follow {
		o.Done = dead
	}
	return logfile.Follow(ctx, dir, name, pos, out, o)
}

// AllocExec finds the task a command runs beside, as berth's exec does.
func (b nomadBackend) AllocExec(ctx context.Context, id, task string) (nomadapi.Execer, error) {
	a := b.a
	al, err := a.findAlloc(ctx, id)
	if err != nil {
		return nil, toNomadErr(err)
	}
	if task != "" {
		if err := validName("task", task); err != nil {
			return nil, toNomadErr(err)
		}
	}
	ex, name, err := a.runner.ExecTarget(al.ID, task)
	if err != nil {
		return nil, toNomadErr(err)
	}
	return &nomadExec{a: a, allocID: al.ID, task: name, ex: ex}, nil
}

// nomadExec runs a command of Nomad's exec websocket through berth's
// exec session (alloc.go).
type nomadExec struct {
	a       *Agent
	allocID string
	task    string
	ex      driver.Execer
}

func (e *nomadExec) Task() string { return e.task }

func (e *nomadExec) Exec(ctx context.Context, cmd []string, tty bool, in <-chan nomadapi.ExecInput, out func(stderr bool, p []byte) error) (int, error) {
	s, err := newExecStdio(tty)
	if err != nil {
		return 126, fmt.Errorf("allocation %s: exec: %w", e.allocID, err)
	}
	defer s.close()
	// The reader applies the client's input to s until the client is
	// gone or the session ended (stop): s is closed only after it
	// returned.
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reader.Add(1)
	res := e.a.execSession(e.allocID, e.task, e.ex, execQuery{task: e.task, cmd: cmd, tty: tty}, s, execClient{
		read: func(s *execStdio, cancel context.CancelFunc) {
			defer reader.Done()
			defer cancel()
			for {
				var x nomadapi.ExecInput
				var ok bool
				select {
				case <-stop:
					return
				case x, ok = <-in:
					if !ok {
						return
					}
				}
				switch {
				case len(x.Data) > 0:
					s.stdin(x.Data)
				case x.Close:
					s.stdinEOF()
				case x.Rows > 0:
					s.resize(x.Rows, x.Cols)
				}
			}
		},
		write: func(typ byte, p []byte) error { return out(typ == api.FrameStderr, p) },
	})
	close(stop)
	reader.Wait()
	if res.Error != "" {
		return res.ExitCode, errors.New(res.Error)
	}
	return res.ExitCode, nil
}

func (b nomadBackend) Services(ctx context.Context, name string) ([]api.ServiceRegistration, error) {
	if name != "" {
		if err := validName("service name", name); err != nil {
			return nil, toNomadErr(err)
		}
	}
	l, err := b.a.node.Services.List(ctx, store.ServiceFilter{Name: name})
	if err != nil {
		return nil, err
	}
	out := wireServices(l)
	for i := range out {
		out[i].NodeID = nodeUUID(out[i].NodeID)
	}
	return out, nil
}

// EventSnapshot is the node's allocations, jobs and services, which the
// Nomad API's event stream compares from one look to the next.
func (b nomadBackend) EventSnapshot(ctx context.Context) (nomadapi.EventSnapshot, error) {
	allocs, err := b.Allocs(ctx, "")
	if err != nil {
		return nomadapi.EventSnapshot{}, err
	}
	jobs, err := b.a.listJobs(ctx)
	if err != nil {
		return nomadapi.EventSnapshot{}, err
	}
	svcs, err := b.Services(ctx, "")
	if err != nil {
		return nomadapi.EventSnapshot{}, err
	}
	return nomadapi.EventSnapshot{Allocs: allocs, Jobs: jobs, Services: svcs}, nil
}
