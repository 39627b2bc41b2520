package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

var (
	_ driver.Sweeper = (*Driver)(nil)
	_ driver.Finder  = (*Driver)(nil)
)

// Recover re-attaches a task's container after the berth that started it
// died: dockerd keeps the container and its state. It must carry this
// data dir's store label and the handle's alloc and task; its log copy
// goes on from where the dead berth recorded it.
func (d *Driver) Recover(ctx context.Context, th store.TaskHandle) (driver.Handle, error) {
	if th.Driver != "" && th.Driver != Name {
		return nil, fmt.Errorf("docker: recover a %q task handle: %w", th.Driver, driver.ErrNotRecoverable)
	}
	ref := th.ContainerID
	if ref == "" {
		ref = th.ContainerName
	}
	if ref == "" {
		return nil, fmt.Errorf("docker: recover: the handle names no container: %w", driver.ErrNotRecoverable)
	}
	st, err := d.c.inspect(ctx, ref)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("docker: recover container %s: gone: %w", ref, driver.ErrNotRecoverable)
	}
	if err != nil {
		return nil, fmt.Errorf("docker: recover container %s: %w", ref, err)
	}
	labels := st.Config.Labels
	name := strings.TrimPrefix(st.Name, "/")
	switch {
	case labels[LabelStore] != d.storeID:
		return nil, fmt.Errorf("docker: recover container %s: store label %q, this data dir's is %q: %w", ref, labels[LabelStore], d.storeID, driver.ErrNotRecoverable)
	case labels[LabelPause] != "":
		return nil, fmt.Errorf("docker: recover container %s: a pause container, not a task's: %w", ref, driver.ErrNotRecoverable)
	case th.AllocID != "" && labels[LabelAllocID] != th.AllocID, th.Task != "" && labels[LabelTask] != th.Task:
		return nil, fmt.Errorf("docker: recover container %s: it is task %s/%s's, not %s/%s: %w", ref, labels[LabelAllocID], labels[LabelTask], th.AllocID, th.Task, driver.ErrNotRecoverable)
	case th.ContainerName != "" && name != th.ContainerName:
		return nil, fmt.Errorf("docker: recover container %s: named %q, not %q: %w", ref, name, th.ContainerName, driver.ErrNotRecoverable)
	}
	h := &handle{d: d, id: st.ID, name: name, allocID: labels[LabelAllocID], task: labels[LabelTask]}
	if cs, err := readCopyState(d.copyStatePath(name)); err == nil {
		if h.logs, err = newLogCopier(d.jsonLogPath(st.ID), d.copyStatePath(name), cs.logTarget, cs.Offset, d.logInterval); err != nil {
			d.log.Warn("cannot resume copying the task's log", "container", name, "err", err)
		} else {
			h.logs.start()
		}
	}
	d.log.Debug("re-attached container", "container", name, "id", st.ID, "status", st.State.Status)
	return h, nil
}

// Leftovers lists the containers of a data dir (label berth.store),
// running or not: task containers and pause containers (no task).
func (d *Driver) Leftovers(ctx context.Context, storeID string) ([]driver.Leftover, error) {
	if storeID == "" {
		return nil, fmt.Errorf("docker: leftovers of an empty store ID")
	}
	l, err := d.c.listByLabel(ctx, LabelStore, storeID)
	if err != nil {
		return nil, fmt.Errorf("docker: list this data dir's containers: %w", err)
	}
	out := make([]driver.Leftover, 0, len(l))
	for _, e := range l {
		out = append(out, driver.Leftover{Driver: Name, StoreID: storeID, Kind: "container", ID: e.ID, AllocID: e.Labels[LabelAllocID], Task: e.Labels[LabelTask]})
	}
	return out, nil
}

// RemoveLeftover removes one of Leftovers' containers once it checked
// that it still carries l's store label.
func (d *Driver) RemoveLeftover(ctx context.Context, l driver.Leftover) error {
	st, err := d.c.inspect(ctx, l.ID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("docker: inspect container %s: %w", l.ID, err)
	}
	if l.StoreID == "" || st.Config.Labels[LabelStore] != l.StoreID {
		return fmt.Errorf("docker: container %s is store %q's, not %q's", l.ID, st.Config.Labels[LabelStore], l.StoreID)
	}
	if err := d.removeContainer(ctx, st.ID); err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	return driver.RemoveFiles(d.copyStatePath(strings.TrimPrefix(st.Name, "/")))
}

// Find implements driver.Finder: the container of the task an earlier
// berth created and did not record, found by its labels, as the podman
// driver's Find.
func (d *Driver) Find(ctx context.Context, req driver.FindRequest) (driver.Handle, []string, error) {
	allocID, task := req.AllocID, req.Task
	l, err := d.c.listByLabel(ctx, LabelAllocID, allocID)
	if err != nil {
		return nil, nil, fmt.Errorf("docker: find the containers of task %s/%s: %w", allocID, task, err)
	}
	want := ContainerName(allocID, task)
	var h driver.Handle
	var removed, lost []string
	for _, e := range l {
		if e.Labels[LabelStore] != d.storeID || e.Labels[LabelTask] != task || e.Labels[LabelPause] != "" {
			continue
		}
		name := ""
		if len(e.Names) > 0 {
			name = strings.TrimPrefix(e.Names[0], "/")
		}
		if h == nil && name == want && e.State != "created" {
			h, err = d.Recover(ctx, store.TaskHandle{Driver: Name, ContainerID: e.ID, ContainerName: name, AllocID: allocID, Task: task})
			if err == nil {
				continue
			}
			if !errors.Is(err, driver.ErrNotRecoverable) {
				return nil, removed, err
			}
		}
		if err := d.removeContainer(ctx, e.ID); err != nil {
			return h, removed, fmt.Errorf("docker: remove container %s of task %s/%s: %w", name, allocID, task, err)
		}
		if name != "" {
			_ = driver.RemoveFiles(d.copyStatePath(name))
		}
		removed = append(removed, "container "+shortID(e.ID))
		if e.State != "created" {
			lost = append(lost, fmt.Sprintf("container %s (%s)", shortID(e.ID), e.State))
		}
	}
	if h == nil && len(lost) > 0 {
		return nil, removed, fmt.Errorf("docker: task %s/%s: removed %s: %w", allocID, task, strings.Join(lost, ", "), driver.ErrExitUnknown)
	}
	return h, removed, nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
