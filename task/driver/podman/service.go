package podman

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/internal/flock"
	"github.com/berth/berth/task/driver"
)

// ErrServiceStart is returned when the podman service berth started does
// not answer.
var ErrServiceStart = errors.New("podman service did not start")

const (
	serviceStartTimeout = 20 * time.Second
	serviceStopGrace    = 5 * time.Second
)

// rlimits are the task's open files and processes limits. podman's own
// default (1048576) cannot be set by a root without CAP_SYS_RESOURCE whose
// hard limit is lower, and runc then fails every container ("error setting
// rlimit type 7"); so berth asks for what its own process may hand down.
// NPROC above 32768 was refused on the reference machine even under a higher
// hard limit, hence the cap.
type rlimits struct{ nofile, nproc uint64 }

func hostRlimits() rlimits {
	r := rlimits{nofile: 4096, nproc: 4096}
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &l) == nil && l.Max > 0 {
		r.nofile = min(l.Max, 1<<20)
	}
	if unix.Getrlimit(unix.RLIMIT_NPROC, &l) == nil && l.Max > 0 {
		r.nproc = min(l.Max, 32768)
	}
	return r
}

// containersConf is the configuration of the podman service berth starts.
// Each line is something the stock configuration gets wrong on a host with
// hybrid cgroups, no systemd as PID 1 and no CAP_SYS_RESOURCE:
//   - crun refuses hybrid cgroups, runc works;
//   - the systemd cgroup manager and journald event logger need systemd;
//   - the default ulimits cannot be set (see rlimits).
//
// Storage (overlay, /var/lib/containers/storage) and tmp dir stay podman's
// defaults so that images built with the podman CLI are visible to the
// service and `podman ps` shows berth's containers.
func containersConf(r rlimits) string {
	return fmt.Sprintf(`# Written by berth for the podman service it starts; rewritten at every start.
[containers]
default_ulimits = ["nofile=%d:%d", "nproc=%d:%d"]
log_driver = "k8s-file"
log_size_max = -1

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`, r.nofile, r.nofile, r.nproc, r.nproc)
}

// service is a `podman system service` berth started and must stop.
type service struct {
	cmd     *exec.Cmd
	pidFile string
	socket  string
	logPath string
	exited  chan struct{} // closed once cmd.Wait returned
	log     *slog.Logger
}

// startService runs `podman system service` on socket with CONTAINERS_CONF
// pointing at conf, and waits until it answers.
func startService(ctx context.Context, podmanBin, socket, conf, stateDir string, log *slog.Logger) (*service, error) {
	pidFile := filepath.Join(stateDir, "service.pid")
	logPath := filepath.Join(stateDir, "service.log")

	// A socket file nobody answers on is left from a service that died;
	// podman would fail to bind it.
	if fi, err := os.Lstat(socket); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if err := os.Remove(socket); err != nil {
			return nil, fmt.Errorf("removing stale podman socket %s: %w", socket, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		return nil, fmt.Errorf("creating podman socket dir for %s: %w", socket, err)
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating podman service log %s: %w", logPath, err)
	}
	defer logFile.Close() // the child has its own copy

	// Not CommandContext: the service must outlive the ctx of New.
	cmd := exec.Command(podmanBin, "system", "service", "--time=0", "unix://"+socket)
	cmd.Env = append(withoutEnv(os.Environ(), "CONTAINERS_CONF"), "CONTAINERS_CONF="+conf)
	// A file, not a pipe: a service that logs a lot must never block on
	// a reader berth does not run.
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Own process group, so that a terminal's Ctrl-C to berth does not kill
	// the service before berth stopped its tasks. SIGTERM when berth dies
	// (SIGKILL too): containers live on in their conmon, and the next
	// berth starts a service of its own; a service of a dead berth must
	// not run on for ever.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	s := &service{cmd: cmd, pidFile: pidFile, socket: socket, logPath: logPath, exited: make(chan struct{}), log: log}
	// The parent-death signal is sent when the thread that forked exits,
	// not the process: the fork and the wait run on one locked thread,
	// kept until the service has exited (Go ends threads a locked
	// goroutine leaves, as the namespace code does).
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		// How it ended is in cmd.ProcessState, which the start's
		// error reports; stop only waits for the end.
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting podman service on %s: %w", socket, err)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		return nil, errors.Join(fmt.Errorf("writing podman service PID file %s: %w", pidFile, err), s.stop())
	}

	c := newClient(socket)
	defer c.close()
	wctx, cancel := context.WithTimeout(ctx, serviceStartTimeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		pctx, pcancel := context.WithTimeout(wctx, time.Second)
		err := c.ping(pctx)
		pcancel()
		if err == nil {
			log.Info("started podman service", "socket", socket, "pid", cmd.Process.Pid, "containers_conf", conf)
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, errors.Join(fmt.Errorf("%w: podman system service on %s exited (%s): %s",
				ErrServiceStart, socket, cmd.ProcessState, tail(logPath)), driver.RemoveFiles(pidFile))
		case <-wctx.Done():
			return nil, errors.Join(fmt.Errorf("%w: no answer on %s after %s: %v; podman said: %s",
				ErrServiceStart, socket, serviceStartTimeout, err, tail(logPath)), s.stop())
		case <-t.C:
		}
	}
}

// stop sends SIGTERM, then SIGKILL after a grace period, to the PID berth
// started, reaps it and removes its files.
func (s *service) stop() error {
	pid := s.cmd.Process.Pid
	// The end of the process is what counts, and s.exited says it: a
	// signal fails only for a process that has ended already.
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(serviceStopGrace):
		s.log.Warn("podman service ignored SIGTERM, killing it", "pid", pid, "socket", s.socket)
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.log.Info("stopped podman service", "socket", s.socket, "pid", pid)
	// Unless another berth process has started a service on the socket
	// since this one died (revive): then the files are that one's.
	if b, err := os.ReadFile(s.pidFile); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
		// podman leaves its socket file behind.
		if err := driver.RemoveFiles(s.pidFile, s.socket); err != nil {
			return fmt.Errorf("podman service on %s stopped: %w", s.socket, err)
		}
	}
	return nil
}

// sharedService is berth's podman service on one data dir, as one Driver
// uses it. Every berth process with that data dir (an agent, `berth run`,
// `berth gc`) uses the same service: each holds the users lock shared for
// as long as it uses it, and the last one to let go stops it. Starting and
// stopping happen under the service lock, so two processes never start two
// services on one socket, and none stops a service another just adopted.
type sharedService struct {
	users            *flock.Lock
	own              *service // set when this process started it
	stateDir, socket string
	bin, conf        string // to start it again (revive)
	log              *slog.Logger

	mu sync.Mutex // guards own (revive replaces it)
}

func serviceLockPaths(stateDir string) (lock, users string) {
	return filepath.Join(stateDir, "service.lock"), filepath.Join(stateDir, "service.users")
}

// acquireService finds the berth service on socket or starts one. It
// returns nil, and no error, when a service answers on socket that no berth
// process of this data dir started (an operator's): it is used as is.
func acquireService(ctx context.Context, podmanBin, socket, conf, stateDir string, log *slog.Logger) (*sharedService, error) {
	lockPath, usersPath := serviceLockPaths(stateDir)
	lk, err := flock.Acquire(ctx, lockPath, flock.Options{Exclusive: true})
	if err != nil {
		return nil, fmt.Errorf("podman service on %s: %w", socket, err)
	}
	defer lk.Unlock()
	pidFile := filepath.Join(stateDir, "service.pid")

	if pid := liveService(pidFile, socket); pid > 0 {
		// Unused means its berth died without stopping it: replace it, it
		// may have been started with an older containers.conf.
		if only, err := flock.TryAcquire(usersPath, flock.Options{Exclusive: true}); err == nil {
			only.Unlock()
			reapStaleService(pidFile, socket, log)
		} else if pingOK(ctx, socket) {
			users, err := flock.Acquire(ctx, usersPath, flock.Options{})
			if err != nil {
				return nil, fmt.Errorf("podman service on %s: %w", socket, err)
			}
			log.Debug("using the podman service another berth process started", "socket", socket, "pid", pid)
			return &sharedService{users: users, stateDir: stateDir, socket: socket, bin: podmanBin, conf: conf, log: log}, nil
		}
	} else if pingOK(ctx, socket) {
		log.Info("using existing podman service", "socket", socket)
		return nil, nil
	}

	if podmanBin, err = exec.LookPath(podmanBin); err != nil {
		return nil, fmt.Errorf("no service on %s and no podman binary: %w", socket, err)
	}
	svc, err := startService(ctx, podmanBin, socket, conf, stateDir, log)
	if err != nil {
		return nil, err
	}
	users, err := flock.Acquire(ctx, usersPath, flock.Options{})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("podman service on %s: %w", socket, err), svc.stop())
	}
	return &sharedService{users: users, own: svc, stateDir: stateDir, socket: socket, bin: podmanBin, conf: conf, log: log}, nil
}

// revive starts berth's service on the socket again when it no longer
// answers (killed, crashed): containers live on in their conmon, but no
// task could be started, stopped or removed without it. Under the
// service lock, so that of the berth processes sharing it only the first
// starts one; the others find it answering. The new service is this
// process's to stop when it is the last user.
func (s *sharedService) revive(ctx context.Context) error {
	lockPath, _ := serviceLockPaths(s.stateDir)
	lk, err := flock.Acquire(ctx, lockPath, flock.Options{Exclusive: true})
	if err != nil {
		return fmt.Errorf("podman service on %s: %w", s.socket, err)
	}
	defer lk.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if pingOK(ctx, s.socket) {
		return nil
	}
	pidFile := filepath.Join(s.stateDir, "service.pid")
	if s.own != nil {
		if err := s.own.stop(); err != nil {
			// The new service writes its own files over them.
			s.log.Warn("stopping the podman service that no longer answered", "err", err)
		}
		s.own = nil
	} else {
		reapStaleService(pidFile, s.socket, s.log)
	}
	bin, err := exec.LookPath(s.bin)
	if err != nil {
		return fmt.Errorf("podman service on %s is gone and there is no podman binary: %w", s.socket, err)
	}
	svc, err := startService(ctx, bin, s.socket, s.conf, s.stateDir, s.log)
	if err != nil {
		return err
	}
	s.log.Warn("the podman service had stopped answering; started it again", "socket", s.socket, "pid", svc.cmd.Process.Pid)
	s.own = svc
	return nil
}

// release lets go of the service, and stops it if no other berth process
// uses it.
func (s *sharedService) release(ctx context.Context) error {
	lockPath, usersPath := serviceLockPaths(s.stateDir)
	lk, err := flock.Acquire(ctx, lockPath, flock.Options{Exclusive: true})
	if err != nil {
		s.log.Warn("podman service: cannot take the service lock; leaving the service to the next berth", "err", err)
		s.users.Unlock()
		return nil
	}
	defer lk.Unlock()
	s.users.Unlock()
	last, err := flock.TryAcquire(usersPath, flock.Options{Exclusive: true})
	if err != nil {
		return nil // another berth process still uses it
	}
	defer last.Unlock()
	s.mu.Lock()
	own := s.own
	s.mu.Unlock()
	if own != nil {
		return own.stop()
	}
	reapStaleService(filepath.Join(s.stateDir, "service.pid"), s.socket, s.log)
	if err := driver.RemoveFiles(s.socket); err != nil {
		return fmt.Errorf("podman service on %s: %w", s.socket, err)
	}
	return nil
}

// liveService is the PID in pidFile if it is a podman service on socket.
func liveService(pidFile, socket string) int {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	p, err := openMatching(pid, func(cmdline []byte) bool { return isServiceOn(cmdline, socket) })
	if err != nil || p == nil {
		return 0
	}
	p.Close()
	return pid
}

func pingOK(ctx context.Context, socket string) bool { return Ping(ctx, socket) == nil }

// reapStaleService stops a service a previous berth started on the same
// socket and did not stop because it died. Only a process whose command
// line is that service is touched.
func reapStaleService(pidFile, socket string, log *slog.Logger) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	defer os.Remove(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	p, err := openMatching(pid, func(cmdline []byte) bool { return isServiceOn(cmdline, socket) })
	if err != nil || p == nil {
		return
	}
	defer p.Close()
	log.Warn("stopping podman service left by a previous berth", "pid", pid, "socket", socket)
	// WaitOrKill below kills what SIGTERM did not end, and reports.
	_ = p.Signal(unix.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 2*serviceStopGrace)
	defer cancel()
	if _, err := p.WaitOrKill(ctx, serviceStopGrace); err != nil {
		log.Error("stale podman service did not exit", "pid", pid, "err", err)
	}
}

func isServiceOn(cmdline []byte, socket string) bool {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) < 3 || !strings.HasSuffix(args[0], "podman") {
		return false
	}
	s := strings.Join(args[1:], " ")
	return strings.Contains(s, "system service") && slices.Contains(args, "unix://"+socket)
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, e := range env {
		if !strings.HasPrefix(e, key+"=") {
			out = append(out, e)
		}
	}
	return out
}

// tail returns the end of a log file for an error message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	if len(b) == 0 {
		return "(no output)"
	}
	return string(b)
}
