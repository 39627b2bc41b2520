package artifact

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth/berth/internal/helperbin"
	"golang.org/x/sys/unix"
)

// Binary is the fetcher's program (cmd/berth-fetch), installed beside berth.
const Binary = "berth-fetch"

// PathEnv names the fetcher binary for processes that cannot be told
// otherwise (tests, a berth run from a build directory).
const PathEnv = "BERTH_FETCH"

// ErrNoFetcher is returned when the berth-fetch binary is not found.
var ErrNoFetcher = errors.New(Binary + " not found")

// Find locates the fetcher binary: explicit, $BERTH_FETCH, beside the
// running executable (an installed berth), then $PATH, as berth-supervisor
// is found.
func Find(explicit string) (string, error) {
	return helperbin.Find(explicit, Binary, PathEnv, ErrNoFetcher)
}

// Request is one artifact to fetch, resolved by the runner.
type Request struct {
	Spec Spec
	// DestDir is the destination directory, SrcDir the local source's
	// directory (nil for a URL): both opened O_PATH by the runner, beneath
	// the allocation directory.
	DestDir, SrcDir *os.File
	// Helper is the fetcher binary, berth-fetch ("" finds it: Find).
	Helper string
	// OnProgress is called once when the first bytes are in.
	OnProgress func()
}

// Fetch runs the sandboxed child for r and waits for it; ctx ending (the
// allocation stopped) or Limits.HTTPReadTimeout passing kills it. The
// child dies with the runner's process too (parent-death signal), so a
// crashed agent leaves no fetch running.
func Fetch(ctx context.Context, r Request) error {
	s := r.Spec
	s.Limits = s.Limits.orDefault()
	helper, err := Find(r.Helper)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrArtifact, err)
	}
	memfd, err := unix.MemfdCreate("berth-fetch-spec", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("%w: memfd for the fetch spec: %w", ErrArtifact, err)
	}
	specFile := os.NewFile(uintptr(memfd), "fetch-spec")
	defer specFile.Close()
	if _, err := specFile.Write(s.marshal()); err != nil {
		return fmt.Errorf("%w: write the fetch spec: %w", ErrArtifact, err)
	}
	rep, repW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrArtifact, err)
	}
	defer rep.Close()
	src := r.SrcDir
	if src == nil {
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			repW.Close()
			return fmt.Errorf("%w: %w", ErrArtifact, err)
		}
		defer devnull.Close()
		src = devnull
	}
	ctx, cancel := context.WithTimeout(ctx, s.Limits.HTTPReadTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, helper, StageCommand, s.AllocID, s.Task)
	cmd.Args[0] = Binary
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{specFile, repW, r.DestDir, src}
	stderr := &tailBuffer{max: 4096}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second
	// The parent-death signal follows the thread that forked the child:
	// that thread stays until the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err = cmd.Start()
	repW.Close()
	if err != nil {
		return fmt.Errorf("%w: start %s: %w", ErrArtifact, helper, err)
	}
	var childErr string
	sc := bufio.NewScanner(rep)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "progress":
			if r.OnProgress != nil {
				r.OnProgress()
			}
		case strings.HasPrefix(line, "err "):
			if m, err := strconv.Unquote(line[4:]); err == nil {
				childErr = m
			} else {
				childErr = line[4:]
			}
		}
	}
	werr := cmd.Wait()
	switch {
	case ctx.Err() != nil && werr != nil:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w: %w: fetch stopped after http_read_timeout (%s)", ErrArtifact, ErrLimit, s.Limits.HTTPReadTimeout)
		}
		return fmt.Errorf("%w: fetch stopped: %w", ErrArtifact, ctx.Err())
	case childErr != "":
		if strings.Contains(childErr, ErrLimit.Error()) {
			return fmt.Errorf("%w: %w: %s", ErrArtifact, ErrLimit, strings.TrimPrefix(childErr, ErrLimit.Error()+": "))
		}
		return fmt.Errorf("%w: %s", ErrArtifact, strings.TrimPrefix(childErr, ErrArtifact.Error()+": "))
	case werr != nil:
		return fmt.Errorf("%w: the fetch helper failed: %v: %s", ErrArtifact, werr, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
