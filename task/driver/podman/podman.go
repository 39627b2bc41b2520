// Package podman runs berth tasks as podman containers inside the group's
// network namespace, through the libpod REST API of a podman service.
//
// The podman Go bindings are not used on purpose: they pull in most of
// podman. The driver speaks the few endpoints it needs with net/http, and
// uses the podman CLI only to start a service when none answers.
package podman

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/internal/pidfd"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// Name is the driver's name in job specs and task handles.
const Name = "podman"

// Labels berth puts on every container, so that garbage collection can
// find orphans with ListByLabel.
const (
	LabelAllocID = "berth.alloc_id"
	LabelTask    = "berth.task"
	// LabelStore is the store ID of the data dir whose berth made the
	// container (store.IDFor): a sweep takes only its own data dir's.
	LabelStore = "berth.store"
)

// DefaultDataDir is used when Options.DataDir is empty.
const DefaultDataDir = "/var/lib/berth"

// ImageBuildScript builds the only image this machine can have
// (localhost/busybox:latest): there is no registry, and berth never pulls.
const ImageBuildScript = "scripts/image/build-busybox.sh"

// imageBuildHint says so in a task's error.
const imageBuildHint = "build it with " + ImageBuildScript + " (berth never pulls images)"

// Options configure a Driver.
type Options struct {
	// Socket is a podman service's unix socket. If a service answers
	// there it is used as is (and never stopped); otherwise berth starts its
	// own on this path. Empty means <DataDir>/podman/podman.sock.
	Socket string
	// DataDir holds the driver's state in its podman/ subdirectory:
	// containers.conf, the service's PID file and log, container logs
	// before they are split, conmon PID files.
	DataDir string
	Logger  *slog.Logger
	// PodmanPath is the podman binary; empty means "podman" from PATH.
	PodmanPath string
	// Policy is what tasks may ask for on this node.
	Policy Policy
}

// Driver runs tasks as podman containers.
type Driver struct {
	log      *slog.Logger
	storeID  string
	stateDir string
	socket   string
	confPath string
	bin      string // the podman binary (alloc exec runs `podman exec`)
	limits   rlimits
	policy   Policy
	c        *client
	svc      *sharedService // nil when the service is not berth's

	// waitInterval is how often podman re-checks a container whose conmon
	// berth could not watch; logInterval how often a running task's output
	// is copied to its log files.
	waitInterval time.Duration
	logInterval  time.Duration

	closeOnce sync.Once
}

var _ driver.Driver = (*Driver)(nil)

// New connects to a podman service, starting one if none answers on the
// socket. Close stops a service New started.
func New(ctx context.Context, opts Options) (*Driver, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("driver", Name)
	dataDir := opts.DataDir
	if dataDir == "" {
		dataDir = DefaultDataDir
	}
	stateDir := filepath.Join(dataDir, "podman")
	for _, dir := range []string{stateDir, filepath.Join(stateDir, "logs"), filepath.Join(stateDir, "conmon")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("podman: creating state dir %s: %w", dir, err)
		}
	}
	socket := opts.Socket
	if socket == "" {
		socket = filepath.Join(stateDir, "podman.sock")
	}
	d := &Driver{
		log:          log,
		storeID:      store.IDFor(dataDir),
		stateDir:     stateDir,
		socket:       socket,
		confPath:     filepath.Join(stateDir, "containers.conf"),
		limits:       hostRlimits(),
		policy:       opts.Policy,
		waitInterval: 100 * time.Millisecond,
		logInterval:  250 * time.Millisecond,
	}
	// Written even when an existing service is used: it documents what
	// this host needs and is what `CONTAINERS_CONF=... podman` should use.
	if err := driver.WriteFileAtomic(d.confPath, []byte(containersConf(d.limits)), 0o644); err != nil {
		return nil, fmt.Errorf("podman: writing %s: %w", d.confPath, err)
	}

	podmanBin := opts.PodmanPath
	if podmanBin == "" {
		podmanBin = "podman"
	}
	svc, err := acquireService(ctx, podmanBin, socket, d.confPath, stateDir, log)
	if err != nil {
		return nil, fmt.Errorf("podman: %w", err)
	}
	d.svc = svc
	d.bin = podmanBin
	d.c = newClient(socket)
	if svc != nil {
		d.c.revive = svc.revive
	}
	return d, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// pingTimeout is how long a service has to answer a ping before it is
// taken as absent.
const pingTimeout = 2 * time.Second

// Ping checks that a podman service answers on socket. The driver asks it
// before starting a service of its own, `berth doctor` to report one.
func Ping(ctx context.Context, socket string) error {
	if _, err := os.Stat(socket); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("podman: socket %s: %w", socket, os.ErrNotExist)
		}
		return fmt.Errorf("podman: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	c := newClient(socket)
	defer c.close()
	if err := c.ping(ctx); err != nil {
		return fmt.Errorf("podman: ping: %w", err)
	}
	return nil
}

// ValidateConfig implements driver.Driver.
func (d *Driver) ValidateConfig(cfg map[string]any) error { return d.policy.ValidateConfig(cfg) }

// ListByLabel returns the IDs of all containers, running or not, whose
// label key has value.
func (d *Driver) ListByLabel(ctx context.Context, key, value string) ([]string, error) {
	l, err := d.c.listByLabel(ctx, key, value)
	if err != nil {
		return nil, fmt.Errorf("podman: listing containers with label %s=%s: %w", key, value, err)
	}
	ids := make([]string, 0, len(l))
	for _, e := range l {
		ids = append(ids, e.ID)
	}
	return ids, nil
}

// Close lets go of berth's service, stopping it if no other berth process
// uses it. Containers keep running: conmon does not depend on the service.
func (d *Driver) Close(ctx context.Context) error {
	var err error
	d.closeOnce.Do(func() {
		d.c.close()
		if d.svc != nil {
			err = d.svc.release(ctx)
		}
	})
	return err
}

// nameRE is what podman accepts as a container name.
var nameRE = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// ContainerName is the deterministic name of a task's container, so that a
// restarted berth can find it even without its recorded ID.
func ContainerName(allocID, task string) string {
	return "berth-" + nameRE.ReplaceAllString(allocID, "_") + "-" + nameRE.ReplaceAllString(task, "_")
}

func (d *Driver) rawLogPath(name string) string {
	return filepath.Join(d.stateDir, "logs", name+".log")
}

func (d *Driver) conmonPidPath(name string) string {
	return filepath.Join(d.stateDir, "conmon", name+".pid")
}

// copyStatePath records how far the task's log was copied (logCopier).
func (d *Driver) copyStatePath(name string) string {
	return filepath.Join(d.stateDir, "logs", name+".copy")
}

// createTimeout bounds a container create that runs on past its caller's
// context: long enough for podman under load, short enough that a hung
// service does not hold a stop for long (abandon then removes by name).
const createTimeout = time.Minute

// Start implements driver.Driver.
func (d *Driver) Start(ctx context.Context, t *driver.Task) (driver.Handle, error) {
	tc, err := ParseConfig(t.Config)
	if err == nil {
		err = d.policy.Check(tc)
	}
	if err != nil {
		return nil, fmt.Errorf("task %q of alloc %s: %w", t.TaskName, t.AllocID, err)
	}
	name := ContainerName(t.AllocID, t.TaskName)
	rawLog, pidFile := d.rawLogPath(name), d.conmonPidPath(name)
	spec := d.spec(t, tc, name, rawLog, pidFile)
	if err := applyConfig(spec, t, tc); err != nil {
		return nil, fmt.Errorf("task %q of alloc %s: %w", t.TaskName, t.AllocID, err)
	}

	// A create cut off by ctx (a stop during start) still completes inside
	// podman after berth stopped listening, leaving a container that
	// nothing removes: it was seen under load. So the create runs to its
	// answer on a context of its own, and ctx is honoured just after it,
	// by start failing and abandon removing the container by its ID.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	id, err := d.c.create(cctx, spec)
	if errors.Is(err, ErrNameInUse) {
		// Left by an earlier run of this very task (same alloc and task)
		// that was not destroyed; anything else is not ours to remove.
		if rerr := d.replaceStale(ctx, name, t.AllocID); rerr != nil {
			return nil, fmt.Errorf("podman: creating container %s: %w (and removing the old one: %w)", name, err, rerr)
		}
		id, err = d.c.create(cctx, spec)
	}
	if errors.Is(err, ErrImageNotFound) {
		return nil, fmt.Errorf("podman: task %q of alloc %s: image %q is not in local storage; %s: %w",
			t.TaskName, t.AllocID, tc.Image, imageBuildHint, err)
	}
	if err != nil {
		var apiErr *APIError
		if !errors.As(err, &apiErr) {
			// No answer (ctx ended, service gone): podman may still have
			// created it, and the name is berth's alone.
			d.abandon(&handle{d: d, id: name, name: name, rawLog: rawLog, pidFile: pidFile})
		}
		return nil, fmt.Errorf("podman: creating container %s: %w", name, err)
	}
	// Between the container's creation and the record of its handle: what
	// a crash here leaves is found by its labels (gc's task sweep).
	fault.Point(fault.AfterContainerCreate)
	// Files from a run berth did not clean up would be copied again.
	if err := driver.RemoveFiles(rawLog, pidFile, d.copyStatePath(name)); err != nil {
		d.abandon(&handle{d: d, id: id, name: name, rawLog: rawLog, pidFile: pidFile})
		return nil, fmt.Errorf("podman: container %s: removing an earlier run's files: %w", name, err)
	}

	h := &handle{d: d, id: id, name: name, allocID: t.AllocID, task: t.TaskName, rawLog: rawLog, pidFile: pidFile}
	if t.LogDir != "" && !t.Logs.Disabled {
		tgt := logTarget{Dir: t.LogDir, Task: t.TaskName, MaxFiles: t.Logs.MaxFiles, MaxSize: int64(t.Logs.MaxFileSizeMB) << 20}
		h.logs, err = newLogCopier(rawLog, d.copyStatePath(name), tgt, 0, d.logInterval)
		if err != nil {
			d.abandon(h)
			return nil, fmt.Errorf("podman: task %q of alloc %s: %w", t.TaskName, t.AllocID, err)
		}
	}
	if err := d.c.start(ctx, id); err != nil {
		started, ierr := d.startedAnyway(ctx, id, err)
		if !started {
			d.abandon(h)
			if ierr != nil {
				// It may have run: the caller must not take this for a
				// task that never started and run it again.
				return nil, fmt.Errorf("podman: starting container %s: %w (and it cannot be told whether it ran: %v): %w", name, err, ierr, driver.ErrExitUnknown)
			}
			return nil, fmt.Errorf("podman: starting container %s: %w", name, err)
		}
		d.log.Warn("the start of a container got no answer, but the container ran; it is supervised", "container", name, "err", err)
	}
	// conmon writes its PID file before start returns.
	if h.conmon, err = openConmon(pidFile, id); err != nil {
		d.log.Warn("cannot watch conmon, falling back to polling", "container", name, "err", err)
	}
	if h.logs != nil {
		h.logs.start()
	}
	d.log.Debug("started container", "container", name, "id", id, "alloc_id", t.AllocID, "task", t.TaskName)
	return h, nil
}

// startedAnyway asks, after a start that got no answer (the service died
// mid-request, which the chaos suite does), whether the container ran all
// the same: conmon starts it whatever happens to the service after the
// request arrived, and a batch task that ran must be supervised, not
// removed and run again. An answer from podman (an APIError) or a
// cancelled ctx (a stop during start) is a start that is abandoned as
// before. ierr is set when podman cannot be asked.
func (d *Driver) startedAnyway(ctx context.Context, id string, startErr error) (started bool, ierr error) {
	var apiErr *APIError
	if errors.As(startErr, &apiErr) || ctx.Err() != nil {
		return false, nil
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	st, err := d.c.inspect(ictx, id) // a GET: the client starts the service again if it is gone
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return !neverStarted(st.State.Status), nil
}

// abandon removes what a failed Start created. It runs on its own context:
// the caller's may be what failed.
func (d *Driver) abandon(h *handle) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.Destroy(ctx); err != nil {
		d.log.Error("removing container of a failed start", "container", h.name, "err", err)
	}
}

func (d *Driver) spec(t *driver.Task, tc *TaskConfig, name, rawLog, pidFile string) *specGenerator {
	labels := make(map[string]string, len(tc.Labels)+len(t.Labels)+2)
	for k, v := range tc.Labels {
		labels[k] = v
	}
	for k, v := range t.Labels {
		labels[k] = v
	}
	labels[LabelAllocID] = t.AllocID
	labels[LabelTask] = t.TaskName
	labels[LabelStore] = d.storeID

	s := &specGenerator{
		Name:          name,
		Image:         tc.Image,
		Command:       tc.command(),
		Entrypoint:    tc.Entrypoint,
		WorkDir:       tc.WorkingDir,
		Hostname:      tc.Hostname,
		Env:           t.Env,
		Labels:        labels,
		ConmonPidFile: pidFile,
		Netns:         namespace{NSMode: "host"},
		User:          t.User,
		// Start checked it against the node's policy.
		Privileged: tc.Privileged,
		LogConfiguration: &logConfig{
			Driver: "k8s-file",
			Path:   rawLog,
		},
		// Sent with every container, not only via containers.conf, so
		// that a service berth did not start works too.
		Rlimits: []rlimit{
			{Type: "nofile", Hard: d.limits.nofile, Soft: d.limits.nofile},
			{Type: "nproc", Hard: d.limits.nproc, Soft: d.limits.nproc},
		},
	}
	if t.NetnsPath != "" {
		s.Netns = namespace{NSMode: "path", Value: t.NetnsPath}
	}
	if t.LogDir == "" || t.Logs.Disabled {
		s.LogConfiguration = &logConfig{Driver: "none"}
	}
	if t.KillTimeout > 0 {
		s.StopTimeout = uint(ceilSeconds(t.KillTimeout))
	}
	s.StopSignal = int(t.KillSignal)
	s.Mounts = append(taskDirMounts(t), volumeMounts(t)...)
	return s
}

// replaceStale removes a container named name if it belongs to allocID.
func (d *Driver) replaceStale(ctx context.Context, name, allocID string) error {
	l, err := d.c.listByLabel(ctx, LabelAllocID, allocID)
	if err != nil {
		return err
	}
	for _, e := range l {
		for _, n := range e.Names {
			if strings.TrimPrefix(n, "/") == name {
				d.log.Warn("removing container left by an earlier run of the task", "container", name, "id", e.ID)
				if err := d.removeContainer(ctx, e.ID, name, nil); err != nil {
					return err
				}
				return driver.RemoveFiles(d.rawLogPath(name), d.conmonPidPath(name), d.copyStatePath(name))
			}
		}
	}
	return fmt.Errorf("container %s exists but does not carry %s=%s: not berth's to remove", name, LabelAllocID, allocID)
}

// Cleanup implements driver.Driver: it removes the container of a task
// whose berth died, by ID if recorded, else by name.
func (d *Driver) Cleanup(ctx context.Context, th store.TaskHandle) error {
	if th.Driver != "" && th.Driver != Name {
		return fmt.Errorf("podman: cleanup of a %q task handle: %w", th.Driver, driver.ErrUnknownDriver)
	}
	ref := th.ContainerID
	if ref == "" {
		ref = th.ContainerName
	}
	if ref == "" {
		return nil
	}
	if err := d.removeContainer(ctx, ref, th.ContainerName, nil); err != nil {
		return fmt.Errorf("podman: cleanup: %w", err)
	}
	if th.ContainerName != "" {
		if err := driver.RemoveFiles(d.rawLogPath(th.ContainerName), d.conmonPidPath(th.ContainerName), d.copyStatePath(th.ContainerName)); err != nil {
			return fmt.Errorf("podman: cleanup of container %s: %w", th.ContainerName, err)
		}
	}
	return nil
}

// removeContainer force-removes ref (ID or name) and returns once podman
// no longer knows it and its conmon has exited. conmon is the watched
// conmon if the caller has one; otherwise it is found by name. The caller
// removes the container's files (raw log, conmon PID file) afterwards.
func (d *Driver) removeContainer(ctx context.Context, ref, name string, conmon *pidfd.Process) error {
	if conmon == nil && name != "" {
		// Found before the removal, while conmon may still be alive.
		c, err := openConmon(d.conmonPidPath(name), ref)
		if err == nil && c == nil && ref != name {
			c, err = openConmon(d.conmonPidPath(name), name)
		}
		if err != nil {
			d.log.Warn("cannot watch conmon", "container", ref, "err", err)
		}
		if c != nil {
			defer c.Close()
			conmon = c
		}
	}
	t0 := time.Now()
	for attempt := 1; ; attempt++ {
		err := d.c.remove(ctx, ref)
		if err == nil || errors.Is(err, ErrNotFound) {
			break
		}
		// podman 4.3 refuses a forced removal of a container caught
		// between its process's exit and podman's own cleanup ("could
		// not be stopped: ... container state improper"): a moment later
		// it is an ordinary stopped container.
		if !strings.Contains(err.Error(), "state improper") || attempt == 20 || !driver.SleepCtx(ctx, 100*time.Millisecond) {
			return fmt.Errorf("removing container %s: %w", ref, err)
		}
	}
	// DELETE is synchronous in podman 4; this only guards against a
	// service that answers before its state is committed.
	for {
		ok, err := d.c.exists(ctx, ref)
		if err != nil {
			return fmt.Errorf("checking removal of container %s: %w", ref, err)
		}
		if !ok {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container %s still exists after removal: %w", ref, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t1 := time.Now()
	if conmon != nil {
		killed, err := conmon.WaitOrKill(ctx, 10*time.Second)
		if err != nil {
			return fmt.Errorf("waiting for conmon %d of container %s: %w", conmon.PID(), ref, err)
		}
		if killed {
			d.log.Warn("killed conmon that outlived its container", "container", ref, "pid", conmon.PID())
		}
	}
	d.log.Debug("removed container", "container", ref,
		"remove_ms", t1.Sub(t0).Milliseconds(), "conmon_ms", time.Since(t1).Milliseconds())
	return nil
}
