package podman

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

var _ driver.Sweeper = (*Driver)(nil)

// Recover re-attaches a task's container after the berth that started it
// died: conmon keeps the container, podman its state. The container must
// carry this data dir's store label and the handle's alloc and task; a
// running one is watched through its conmon again and its log copy goes on
// from where the dead berth recorded it; an exited one reports its exit
// code from inspect.
func (d *Driver) Recover(ctx context.Context, th store.TaskHandle) (driver.Handle, error) {
	if th.Driver != "" && th.Driver != Name {
		return nil, fmt.Errorf("podman: recover a %q task handle: %w", th.Driver, driver.ErrNotRecoverable)
	}
	ref := th.ContainerID
	if ref == "" {
		ref = th.ContainerName
	}
	if ref == "" {
		return nil, fmt.Errorf("podman: recover: the handle names no container: %w", driver.ErrNotRecoverable)
	}
	st, err := d.c.inspect(ctx, ref)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("podman: recover container %s: gone: %w", ref, driver.ErrNotRecoverable)
	}
	if err != nil {
		return nil, fmt.Errorf("podman: recover container %s: %w", ref, err)
	}
	labels := st.Config.Labels
	name := strings.TrimPrefix(st.Name, "/")
	switch {
	case labels[LabelStore] != d.storeID:
		return nil, fmt.Errorf("podman: recover container %s: store label %q, this data dir's is %q: %w", ref, labels[LabelStore], d.storeID, driver.ErrNotRecoverable)
	case th.AllocID != "" && labels[LabelAllocID] != th.AllocID, th.Task != "" && labels[LabelTask] != th.Task:
		return nil, fmt.Errorf("podman: recover container %s: it is task %s/%s's, not %s/%s: %w", ref, labels[LabelAllocID], labels[LabelTask], th.AllocID, th.Task, driver.ErrNotRecoverable)
	case th.ContainerName != "" && name != th.ContainerName:
		return nil, fmt.Errorf("podman: recover container %s: named %q, not %q: %w", ref, name, th.ContainerName, driver.ErrNotRecoverable)
	}
	h := &handle{d: d, id: st.ID, name: name, allocID: labels[LabelAllocID], task: labels[LabelTask],
		rawLog: d.rawLogPath(name), pidFile: d.conmonPidPath(name)}
	if cs, err := readCopyState(d.copyStatePath(name)); err == nil {
		if h.logs, err = newLogCopier(h.rawLog, d.copyStatePath(name), cs.logTarget, cs.Offset, d.logInterval); err != nil {
			d.log.Warn("cannot resume copying the task's log", "container", name, "err", err)
		}
	}
	if !isExited(st.State.Status) && st.State.ConmonPid > 0 {
		if h.conmon, err = openConmonPID(st.State.ConmonPid, st.ID); err != nil {
			d.log.Warn("cannot watch conmon, falling back to polling", "container", name, "err", err)
		}
	}
	if h.logs != nil {
		h.logs.start()
	}
	d.log.Debug("re-attached container", "container", name, "id", st.ID, "status", st.State.Status)
	return h, nil
}

// Leftovers lists the containers of a data dir (label berth.store),
// running or not.
func (d *Driver) Leftovers(ctx context.Context, storeID string) ([]driver.Leftover, error) {
	if storeID == "" {
		return nil, fmt.Errorf("podman: leftovers of an empty store ID")
	}
	l, err := d.c.listByLabel(ctx, LabelStore, storeID)
	if err != nil {
		return nil, fmt.Errorf("podman: list this data dir's containers: %w", err)
	}
	out := make([]driver.Leftover, 0, len(l))
	for _, e := range l {
		out = append(out, driver.Leftover{Driver: Name, StoreID: storeID, Kind: "container", ID: e.ID, AllocID: e.Labels[LabelAllocID], Task: e.Labels[LabelTask]})
	}
	return out, nil
}

// RemoveLeftover removes one of Leftovers' containers, once it has
// checked that it still carries l's store label.
func (d *Driver) RemoveLeftover(ctx context.Context, l driver.Leftover) error {
	st, err := d.c.inspect(ctx, l.ID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("podman: inspect container %s: %w", l.ID, err)
	}
	if l.StoreID == "" || st.Config.Labels[LabelStore] != l.StoreID {
		return fmt.Errorf("podman: container %s is store %q's, not %q's", l.ID, st.Config.Labels[LabelStore], l.StoreID)
	}
	name := strings.TrimPrefix(st.Name, "/")
	if err := d.removeContainer(ctx, st.ID, name, nil); err != nil {
		return fmt.Errorf("podman: %w", err)
	}
	if err := driver.RemoveFiles(d.rawLogPath(name), d.conmonPidPath(name), d.copyStatePath(name)); err != nil {
		return fmt.Errorf("podman: container %s: %w", name, err)
	}
	return nil
}

var _ driver.Finder = (*Driver)(nil)

// Find implements driver.Finder: the container of the task an earlier
// berth created and did not record (found by its labels). The one named
// as Start names it is re-attached (Recover), running or exited (its exit
// code then read from inspect, so that it is recorded and the task not
// run again); its stop signal is in its config. One that never started
// (created only: nothing of the task ran) and any other of that task are
// removed; when a removed one had run, the error wraps
// driver.ErrExitUnknown.
func (d *Driver) Find(ctx context.Context, req driver.FindRequest) (driver.Handle, []string, error) {
	allocID, task := req.AllocID, req.Task
	l, err := d.c.listByLabel(ctx, LabelAllocID, allocID)
	if err != nil {
		return nil, nil, fmt.Errorf("podman: find the containers of task %s/%s: %w", allocID, task, err)
	}
	want := ContainerName(allocID, task)
	var h driver.Handle
	var removed, lost []string
	for _, e := range l {
		if e.Labels[LabelStore] != d.storeID || e.Labels[LabelTask] != task {
			continue
		}
		name := ""
		if len(e.Names) > 0 {
			name = strings.TrimPrefix(e.Names[0], "/")
		}
		if h == nil && name == want {
			st, err := d.c.inspect(ctx, e.ID)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, removed, fmt.Errorf("podman: inspect container %s: %w", name, err)
			}
			if !neverStarted(st.State.Status) {
				h, err = d.Recover(ctx, store.TaskHandle{Driver: Name, ContainerID: e.ID, ContainerName: name, AllocID: allocID, Task: task})
				if err == nil {
					continue
				}
				if !errors.Is(err, driver.ErrNotRecoverable) {
					return nil, removed, err
				}
			}
		}
		if err := d.removeContainer(ctx, e.ID, name, nil); err != nil {
			return h, removed, fmt.Errorf("podman: remove container %s of task %s/%s: %w", name, allocID, task, err)
		}
		if name != "" {
			if err := driver.RemoveFiles(d.rawLogPath(name), d.conmonPidPath(name), d.copyStatePath(name)); err != nil {
				return h, removed, fmt.Errorf("podman: container %s of task %s/%s: %w", name, allocID, task, err)
			}
		}
		removed = append(removed, "container "+shortContainerID(e.ID))
		if !neverStarted(e.State) {
			lost = append(lost, fmt.Sprintf("container %s (%s)", shortContainerID(e.ID), e.State))
		}
	}
	if h == nil && len(lost) > 0 {
		return nil, removed, fmt.Errorf("podman: task %s/%s: removed %s: %w", allocID, task, strings.Join(lost, ", "), driver.ErrExitUnknown)
	}
	return h, removed, nil
}

// neverStarted reports whether a container in state s never ran its
// task (created by an agent that died before starting it).
func neverStarted(s string) bool {
	switch s {
	case "", "created", "configured", "initialized":
		return true
	}
	return false
}

func shortContainerID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
