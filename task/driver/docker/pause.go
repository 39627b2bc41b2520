package docker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/berth/berth/task/driver"
)

// pauseNetns is where the pause container sees berth's namespace.
const pauseNetns = "/berth/netns"

// ensurePause returns the ID of the allocation's pause container, running
// in berth's namespace t.NetnsPath: the one there is when its process is
// in that namespace, else a new one (an old one is removed). The caller
// holds the allocation's lock.
func (d *Driver) ensurePause(ctx context.Context, t *driver.Task) (string, error) {
	name := PauseName(t.AllocID)
	want, err := nsInode(t.NetnsPath)
	if err != nil {
		return "", fmt.Errorf("pause container %s: the allocation's namespace: %w", name, err)
	}
	st, err := d.c.inspect(ctx, name)
	switch {
	case err == nil && st.Config.Labels[LabelStore] != d.storeID:
		return "", fmt.Errorf("pause container %s exists but is store %q's, not this data dir's (%s)", name, st.Config.Labels[LabelStore], d.storeID)
	case err == nil && st.State.Running && pidInNetns(st.State.Pid, want):
		return st.ID, nil
	case err == nil:
		d.log.Warn("replacing a pause container that is not in the allocation's namespace", "container", name, "status", st.State.Status)
		if err := d.removeContainer(ctx, st.ID); err != nil {
			return "", err
		}
	case !errors.Is(err, ErrNotFound):
		return "", fmt.Errorf("pause container %s: %w", name, err)
	}

	if ok, err := d.c.imageExists(ctx, d.pauseImage); err != nil || !ok {
		return "", fmt.Errorf("pause image %q is not in Docker's local storage (%v): build it with %s", d.pauseImage, err, SetupScript)
	}
	labels := map[string]string{LabelAllocID: t.AllocID, LabelStore: d.storeID, LabelPause: "true"}
	for k, v := range t.Labels {
		if _, ours := labels[k]; !ours && k != LabelTask {
			labels[k] = v
		}
	}
	// Its process enters the namespace (setns needs CAP_SYS_ADMIN, the
	// only capability it keeps) and sleeps; Docker's own namespace of the
	// container (mode none) holds nothing but loopback.
	cfg := &containerConfig{
		Image:      d.pauseImage,
		Entrypoint: []string{"/bin/busybox"},
		Cmd:        []string{"nsenter", "--net=" + pauseNetns, "/bin/busybox", "sleep", "2147483647"},
		Labels:     labels,
		StopSignal: "KILL",
		HostConfig: hostConfig{
			NetworkMode:    "none",
			CapDrop:        []string{"ALL"},
			CapAdd:         []string{"CAP_SYS_ADMIN"},
			ReadonlyRootfs: true,
			Mounts:         []mountSpec{{Type: "bind", Source: t.NetnsPath, Target: pauseNetns, ReadOnly: true}},
			LogConfig:      logConfig{Type: "none"},
		},
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	id, err := d.c.create(cctx, name, cfg)
	if err != nil {
		var apiErr *APIError
		if !errors.As(err, &apiErr) {
			_ = d.removeContainer(cctx, name)
		}
		return "", fmt.Errorf("creating pause container %s: %w", name, err)
	}
	if err := d.c.start(ctx, id); err != nil {
		_ = d.removeContainer(cctx, id)
		return "", fmt.Errorf("starting pause container %s: %w", name, err)
	}
	// nsenter enters the namespace before it execs sleep: wait for it, so
	// that no task joins Docker's empty namespace instead.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := d.c.inspect(ctx, id)
		if err == nil && st.State.Running && pidInNetns(st.State.Pid, want) {
			return id, nil
		}
		if err == nil && !st.State.Running {
			_ = d.removeContainer(cctx, id)
			return "", fmt.Errorf("pause container %s exited (%d) before entering namespace %s", name, st.State.ExitCode, t.NetnsPath)
		}
		if time.Now().After(deadline) || !driver.SleepCtx(ctx, 10*time.Millisecond) {
			_ = d.removeContainer(cctx, id)
			return "", fmt.Errorf("pause container %s did not enter namespace %s (%v)", name, t.NetnsPath, err)
		}
	}
}

// releasePause removes the allocation's pause container once no task
// container of the allocation is left: the network teardown that follows
// the last Destroy must find the namespace held by nothing.
func (d *Driver) releasePause(ctx context.Context, allocID string) {
	if err := d.releasePauseErr(ctx, allocID); err != nil {
		d.log.Error("removing pause container", "alloc_id", allocID, "err", err)
	}
}

func (d *Driver) releasePauseErr(ctx context.Context, allocID string) error {
	l, err := d.c.listByLabel(ctx, LabelAllocID, allocID)
	if err != nil {
		return err
	}
	var pause []string
	for _, e := range l {
		if e.Labels[LabelStore] != d.storeID {
			continue
		}
		if e.Labels[LabelPause] == "" {
			return nil // a task container is left: it needs the network
		}
		pause = append(pause, e.ID)
	}
	for _, id := range pause {
		if err := d.removeContainer(ctx, id); err != nil {
			return err
		}
		d.log.Debug("removed pause container", "alloc_id", allocID, "id", id)
	}
	return nil
}

func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func pidInNetns(pid int, ino uint64) bool {
	if pid <= 0 {
		return false
	}
	got, err := nsInode("/proc/" + strconv.Itoa(pid) + "/ns/net")
	return err == nil && got == ino
}
