// Package docker runs berth tasks as Docker Engine containers (Nomad's
// docker driver), through the Engine API of the node's dockerd.
//
// The client is berth's own (client.go), as the podman driver's is: the
// Docker Go client (github.com/docker/docker/client) drags in most of
// moby's tree and its own versions of the OCI and containerd modules, for
// the dozen endpoints berth calls. The API version is negotiated
// (GET /version): the daemon's, capped at MaxAPIVersion (1.41, Debian's
// 20.10), refused below MinAPIVersion.
//
// Networks: Docker cannot put a container into a namespace given by path,
// so a task of a group with a network namespace joins
// `container:<pause>`, a pause container per allocation whose process
// enters berth's pinned namespace (CNI-ADDed by berth as for any
// allocation) and sleeps. The namespace stays berth's: the pause container
// only holds a process in it, and it is removed with the allocation's
// last task container, before the network is torn down.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth/berth/internal/fault"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// Name is the driver's name in job specs and task handles.
const Name = "docker"

// Labels berth puts on every container (the podman driver's), so that
// garbage collection finds orphans by them.
const (
	LabelAllocID = "berth.alloc_id"
	LabelTask    = "berth.task"
	LabelStore   = "berth.store"
	// LabelPause marks an allocation's pause container.
	LabelPause = "berth.pause"
)

// DefaultPauseImage is what scripts/image/docker-setup.sh builds from
// busybox-static (no registry here).
const DefaultPauseImage = "localhost/berth-pause:latest"

// DefaultDataDir is used when Options.DataDir is empty.
const DefaultDataDir = "/var/lib/berth"

// SetupScript starts dockerd and loads the local images.
const SetupScript = "scripts/image/docker-setup.sh"

// Options configure a Driver.
type Options struct {
	// Endpoint is the daemon's socket (unix:///path); empty is DOCKER_HOST,
	// then DefaultEndpoint.
	Endpoint string
	// DataDir holds the driver's state in its docker/ subdirectory.
	DataDir string
	Logger  *slog.Logger
	Policy  Policy
	// PauseImage is the pause containers' image; empty DefaultPauseImage.
	PauseImage string
	// DockerPath is the docker CLI alloc exec runs; empty: /usr/bin/docker
	// (Debian's, the daemon's version) or docker from PATH.
	DockerPath string
}

// Driver runs tasks as Docker containers.
type Driver struct {
	log        *slog.Logger
	storeID    string
	stateDir   string
	endpoint   string
	socket     string
	bin        string
	pauseImage string
	policy     Policy
	c          *client
	version    Version
	rootDir    string // Docker's root dir (/var/lib/docker)

	logInterval time.Duration

	mu     sync.Mutex
	allocs map[string]*allocLock
}

type allocLock struct {
	mu   sync.Mutex
	refs int
}

var _ driver.Driver = (*Driver)(nil)

// New connects to the daemon and negotiates the API version.
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
	endpoint := opts.Endpoint
	if endpoint == "" {
		endpoint = os.Getenv("DOCKER_HOST")
	}
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	socket, err := socketPath(endpoint)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	stateDir := filepath.Join(dataDir, "docker")
	if err := os.MkdirAll(filepath.Join(stateDir, "logs"), 0o700); err != nil {
		return nil, fmt.Errorf("docker: creating state dir %s: %w", stateDir, err)
	}
	bin := opts.DockerPath
	if bin == "" {
		bin = "/usr/bin/docker"
		if _, err := os.Stat(bin); err != nil {
			bin = "docker"
		}
	}
	pause := opts.PauseImage
	if pause == "" {
		pause = DefaultPauseImage
	}
	d := &Driver{log: log, storeID: store.IDFor(dataDir), stateDir: stateDir, endpoint: endpoint, socket: socket,
		bin: bin, pauseImage: pause, policy: opts.Policy, c: newClient(socket), logInterval: 250 * time.Millisecond,
		allocs: map[string]*allocLock{}}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if d.version, err = d.c.negotiate(pctx); err != nil {
		d.c.close()
		return nil, fmt.Errorf("docker: daemon at %s: %w (start one with %s)", endpoint, err, SetupScript)
	}
	info, err := d.c.info(pctx)
	if err != nil {
		d.c.close()
		return nil, fmt.Errorf("docker: daemon at %s: %w", endpoint, err)
	}
	d.rootDir = info.DockerRootDir
	return d, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// ValidateConfig implements driver.Driver.
func (d *Driver) ValidateConfig(cfg map[string]any) error { return d.policy.ValidateConfig(cfg) }

// Close implements driver.Driver: containers keep running, dockerd is not berth's.
func (d *Driver) Close(context.Context) error { d.c.close(); return nil }

// APIVersion is the negotiated API version.
func (d *Driver) APIVersion() string { return d.c.version }

// Probe is what `berth doctor` reports of a daemon.
type Probe struct {
	Endpoint, ServerVersion, APIVersion, StorageDriver, CgroupDriver string
	PauseImage                                                       string
	PauseImagePresent                                                bool
}

// ProbeDaemon asks the daemon at endpoint (empty: DOCKER_HOST or the
// default) what doctor reports.
func ProbeDaemon(ctx context.Context, endpoint, pauseImage string) (Probe, error) {
	if endpoint == "" {
		endpoint = os.Getenv("DOCKER_HOST")
	}
	if endpoint == "" {
		endpoint = DefaultEndpoint
	}
	if pauseImage == "" {
		pauseImage = DefaultPauseImage
	}
	p := Probe{Endpoint: endpoint, PauseImage: pauseImage}
	socket, err := socketPath(endpoint)
	if err != nil {
		return p, err
	}
	c := newClient(socket)
	defer c.close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := c.negotiate(ctx)
	if err != nil {
		return p, err
	}
	p.ServerVersion, p.APIVersion = v.Version, c.version
	info, err := c.info(ctx)
	if err != nil {
		return p, err
	}
	p.StorageDriver, p.CgroupDriver = info.Driver, info.CgroupDriver
	p.PauseImagePresent, err = c.imageExists(ctx, pauseImage)
	return p, err
}

var nameRE = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// ContainerName is the deterministic name of a task's container.
func ContainerName(allocID, task string) string {
	return "berth-" + nameRE.ReplaceAllString(allocID, "_") + "-" + nameRE.ReplaceAllString(task, "_")
}

// PauseName is the name of an allocation's pause container.
func PauseName(allocID string) string {
	return "berth-pause-" + nameRE.ReplaceAllString(allocID, "_")
}

// jsonLogPath is where Docker's json-file driver writes a container's
// output.
func (d *Driver) jsonLogPath(id string) string {
	return filepath.Join(d.rootDir, "containers", id, id+"-json.log")
}

func (d *Driver) copyStatePath(name string) string {
	return filepath.Join(d.stateDir, "logs", name+".copy")
}

// lockAlloc serializes what touches an allocation's pause container.
func (d *Driver) lockAlloc(allocID string) func() {
	d.mu.Lock()
	l := d.allocs[allocID]
	if l == nil {
		l = &allocLock{}
		d.allocs[allocID] = l
	}
	l.refs++
	d.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		d.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(d.allocs, allocID)
		}
		d.mu.Unlock()
	}
}

// createTimeout bounds a create that runs on past its caller's context.
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
	cfg := d.containerConfig(t, tc)
	if err := applyConfig(cfg, t, tc); err != nil {
		return nil, fmt.Errorf("task %q of alloc %s: %w", t.TaskName, t.AllocID, err)
	}
	if err := d.ensureImage(ctx, tc); err != nil {
		return nil, fmt.Errorf("docker: task %q of alloc %s: %w", t.TaskName, t.AllocID, err)
	}

	unlock := d.lockAlloc(t.AllocID)
	defer unlock()
	if cfg.HostConfig.NetworkMode == joinPause {
		pid, err := d.ensurePause(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("docker: task %q of alloc %s: %w", t.TaskName, t.AllocID, err)
		}
		cfg.HostConfig.NetworkMode = "container:" + pid
	}

	// As for podman: the create runs to its answer on a context of its
	// own, so that one cut off does not leave a container nothing removes.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	id, err := d.c.create(cctx, name, cfg)
	if errors.Is(err, ErrNameInUse) {
		if rerr := d.replaceStale(ctx, name, t.AllocID); rerr != nil {
			return nil, fmt.Errorf("docker: creating container %s: %w (and removing the old one: %w)", name, err, rerr)
		}
		id, err = d.c.create(cctx, name, cfg)
	}
	if err != nil {
		var apiErr *APIError
		if !errors.As(err, &apiErr) {
			d.abandon(&handle{d: d, id: name, name: name, allocID: t.AllocID})
		}
		d.releasePause(ctx, t.AllocID)
		return nil, fmt.Errorf("docker: creating container %s: %w", name, err)
	}
	// Between the container's creation and the record of its handle: what
	// a crash here leaves is found by its labels (gc's task sweep, Find).
	fault.Point(fault.AfterContainerCreate)
	if err := driver.RemoveFiles(d.copyStatePath(name)); err != nil {
		d.abandon(&handle{d: d, id: id, name: name, allocID: t.AllocID})
		return nil, fmt.Errorf("docker: container %s: removing an earlier run's files: %w", name, err)
	}
	h := &handle{d: d, id: id, name: name, allocID: t.AllocID, task: t.TaskName}
	if t.LogDir != "" && !t.Logs.Disabled {
		// Docker states LogPath only once the container started; the
		// json-file driver's path is fixed by the root dir and the ID.
		tgt := logTarget{Dir: t.LogDir, Task: t.TaskName, MaxFiles: t.Logs.MaxFiles, MaxSize: int64(t.Logs.MaxFileSizeMB) << 20}
		h.logs, err = newLogCopier(d.jsonLogPath(id), d.copyStatePath(name), tgt, 0, d.logInterval)
		if err != nil {
			d.abandon(h)
			return nil, fmt.Errorf("docker: task %q of alloc %s: %w", t.TaskName, t.AllocID, err)
		}
	}
	if err := d.c.start(ctx, id); err != nil {
		d.abandon(h)
		return nil, fmt.Errorf("docker: starting container %s: %w", name, err)
	}
	if h.logs != nil {
		h.logs.start()
	}
	d.log.Debug("started container", "container", name, "id", id, "alloc_id", t.AllocID, "task", t.TaskName)
	return h, nil
}

// ensureImage pulls the image when it is not in local storage or
// force_pull is set, within image_pull_timeout. Only a registry on this
// host (localhost, a loopback address) is pulled from: berth's nodes
// reach no other, and a pull that would try one is an error naming the
// image, without the daemon going out.
func (d *Driver) ensureImage(ctx context.Context, tc *TaskConfig) error {
	have, err := d.c.imageExists(ctx, tc.Image)
	if err != nil {
		return fmt.Errorf("image %q: %w", tc.Image, err)
	}
	if have && !tc.ForcePull {
		return nil
	}
	const load = "load it into Docker (docker load; " + SetupScript + " loads localhost/busybox:latest)"
	if host := registryHost(tc.Image); !loopbackRegistry(host) {
		why := "is not in Docker's local storage"
		if have {
			why = "is to be pulled (force_pull)"
		}
		return fmt.Errorf("image %q %s, and its registry %s is not on this host: berth pulls only from a registry on localhost: %s: %w",
			tc.Image, why, host, load, ErrImageNotFound)
	}
	pctx, cancel := context.WithTimeout(ctx, tc.ImagePullTimeout)
	defer cancel()
	err = d.c.pull(pctx, tc.Image, registryAuth(tc.Auth))
	if err != nil && tc.AuthSoftFail && tc.Auth != (Auth{}) {
		err = d.c.pull(pctx, tc.Image, "")
	}
	if err != nil {
		return fmt.Errorf("image %q: pulling it failed (%v): %s: %w", tc.Image, err, load, ErrImageNotFound)
	}
	return nil
}

// registryHost is the registry of an image reference, as Docker reads it:
// the first path element when it has a dot or a colon or is localhost,
// else Docker Hub.
func registryHost(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return "docker.io"
}

func loopbackRegistry(host string) bool {
	h := host
	if i := strings.LastIndex(h, ":"); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	h = strings.Trim(h, "[]")
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// abandon removes what a failed Start created, on its own context.
func (d *Driver) abandon(h *handle) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.destroy(ctx, false, true); err != nil {
		d.log.Error("removing container of a failed start", "container", h.name, "err", err)
	}
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
				if err := d.removeContainer(ctx, e.ID); err != nil {
					return err
				}
				return driver.RemoveFiles(d.copyStatePath(name))
			}
		}
	}
	return fmt.Errorf("container %s exists but does not carry %s=%s: not berth's to remove", name, LabelAllocID, allocID)
}

// removeContainer force-removes ref; gone already is not an error.
func (d *Driver) removeContainer(ctx context.Context, ref string) error {
	for attempt := 1; ; attempt++ {
		err := d.c.remove(ctx, ref)
		if err == nil || errors.Is(err, ErrNotFound) {
			return nil
		}
		// "removal of container ... is already in progress": another
		// remover (gc, a concurrent Destroy) is at it; wait for it.
		if !strings.Contains(err.Error(), "already in progress") || attempt == 50 || !driver.SleepCtx(ctx, 100*time.Millisecond) {
			return fmt.Errorf("removing container %s: %w", ref, err)
		}
	}
}

// Cleanup implements driver.Driver.
func (d *Driver) Cleanup(ctx context.Context, th store.TaskHandle) error {
	if th.Driver != "" && th.Driver != Name {
		return fmt.Errorf("docker: cleanup of a %q task handle: %w", th.Driver, driver.ErrUnknownDriver)
	}
	ref := th.ContainerID
	if ref == "" {
		ref = th.ContainerName
	}
	if ref == "" {
		return nil
	}
	if err := d.removeContainer(ctx, ref); err != nil {
		return fmt.Errorf("docker: cleanup: %w", err)
	}
	if th.ContainerName != "" {
		if err := driver.RemoveFiles(d.copyStatePath(th.ContainerName)); err != nil {
			return fmt.Errorf("docker: cleanup of container %s: %w", th.ContainerName, err)
		}
	}
	if th.AllocID != "" {
		d.releasePause(ctx, th.AllocID)
	}
	return nil
}

// envList is the task's environment, sorted.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// signalName is what Docker's StopSignal takes.
func signalName(sig int) string {
	if sig == 0 {
		return ""
	}
	return strconv.Itoa(sig)
}
