package exec

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// v1Controllers are the cgroup v1 hierarchies a task gets a cgroup in, when
// mounted and writable.
var v1Controllers = []string{"memory", "pids", "cpu"}

// hierarchies is where cgroup trees are mounted on this host.
type hierarchies struct {
	// unified is the cgroup2 mount: the root itself on a pure v2 host,
	// <root>/unified on a hybrid one, empty if there is none.
	unified string
	// pureV2 is true when root itself is cgroup2.
	pureV2 bool
	// v1 holds <root>/<controller> for each mounted v1 controller.
	v1 []string
}

func (h hierarchies) all() []string {
	var out []string
	if h.unified != "" {
		out = append(out, h.unified)
	}
	return append(out, h.v1...)
}

func fsMagic(path string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0
	}
	return int64(st.Type)
}

func detectHierarchies(root string) hierarchies {
	if fsMagic(root) == unix.CGROUP2_SUPER_MAGIC {
		return hierarchies{unified: root, pureV2: true}
	}
	var h hierarchies
	if p := filepath.Join(root, "unified"); fsMagic(p) == unix.CGROUP2_SUPER_MAGIC {
		h.unified = p
	}
	for _, c := range v1Controllers {
		p := filepath.Join(root, c)
		if fsMagic(p) == unix.CGROUP_SUPER_MAGIC {
			h.v1 = append(h.v1, p)
		}
	}
	return h
}

// cgroupSet is one task's cgroup, the same relative path in every
// hierarchy where it could be created.
type cgroupSet struct {
	rel     string // e.g. berth/<alloc>-<task>
	unified string // absolute directory in the cgroup2 tree, or ""
	v1      []string
}

// primary is the path recorded in the task handle.
func (c *cgroupSet) primary() string {
	if c.unified != "" {
		return c.unified
	}
	return c.v1[0]
}

func (c *cgroupSet) dirs() []string {
	var out []string
	if c.unified != "" {
		out = append(out, c.unified)
	}
	return append(out, c.v1...)
}

// createCgroups makes rel in every hierarchy it can. It returns nil and the
// reasons when none could be made: running without a cgroup is allowed.
//
// The directories are always fresh: a leftover of the same name (a task
// with the same alloc and name whose berth died before removing it) is
// emptied and removed first. Reusing it would not only inherit stale
// processes: on the kernel measured here (6.18), once "1" was written to a
// cgroup's cgroup.kill, every later clone3(CLONE_INTO_CGROUP) into that
// cgroup is SIGKILLed at birth.
func createCgroups(ctx context.Context, h hierarchies, rel string) (*cgroupSet, error) {
	if old := cgroupSetAt(h, rel); len(old.dirs()) > 0 {
		if err := old.remove(ctx); err != nil {
			return nil, fmt.Errorf("remove leftover cgroup %s: %w", rel, err)
		}
	}
	set := &cgroupSet{rel: rel}
	var errs []error
	for _, root := range h.all() {
		if err := ctx.Err(); err != nil {
			return cleanupPartial(ctx, set, err)
		}
		dir := filepath.Join(root, rel)
		if h.pureV2 && root == h.unified {
			enableControllers(root, filepath.Dir(rel))
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			errs = append(errs, fmt.Errorf("create cgroup parent %s: %w", filepath.Dir(dir), err))
			continue
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			errs = append(errs, fmt.Errorf("create cgroup %s: %w", dir, err))
			continue
		}
		if root == h.unified {
			set.unified = dir
		} else {
			set.v1 = append(set.v1, dir)
		}
	}
	if set.unified == "" && len(set.v1) == 0 {
		return nil, errors.Join(errs...)
	}
	return set, errors.Join(errs...)
}

func cleanupPartial(ctx context.Context, set *cgroupSet, err error) (*cgroupSet, error) {
	return nil, undo(ctx, err, set.remove)
}

// enableControllers delegates memory, pids and cpu down to parentRel on a
// pure v2 host, best effort: a controller a kernel lacks or that is
// already enabled is not an error worth reporting, and the cgroup is
// still useful for tracking and killing without them.
func enableControllers(root, parentRel string) {
	dir := root
	for _, part := range append([]string{""}, strings.Split(parentRel, "/")...) {
		if part != "" {
			dir = filepath.Join(dir, part)
			_ = os.Mkdir(dir, 0o755)
		}
		for _, c := range v1Controllers {
			_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
		}
	}
}

// openUnified opens the cgroup2 directory for clone3's CLONE_INTO_CGROUP,
// or returns -1.
func (c *cgroupSet) openUnified() (int, error) {
	if c == nil || c.unified == "" {
		return -1, nil
	}
	fd, err := unix.Open(c.unified, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open cgroup %s: %w", c.unified, err)
	}
	return fd, nil
}

// join moves pid into every cgroup of the set, skipping skipUnified.
func (c *cgroupSet) join(pid int, skipUnified bool) error {
	var errs []error
	for _, dir := range c.dirs() {
		if skipUnified && dir == c.unified {
			continue
		}
		p := filepath.Join(dir, "cgroup.procs")
		if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0); err != nil {
			errs = append(errs, fmt.Errorf("move pid %d into %s: %w", pid, p, err))
		}
	}
	return errors.Join(errs...)
}

// procs lists the PIDs in any cgroup of the set (zombies are not listed).
func (c *cgroupSet) procs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	var errs []error
	for _, dir := range c.dirs() {
		p := filepath.Join(dir, "cgroup.procs")
		b, err := os.ReadFile(p)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("read %s: %w", p, err))
			}
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || seen[pid] {
				continue
			}
			seen[pid] = true
			out = append(out, pid)
		}
	}
	return out, errors.Join(errs...)
}

// signal sends sig to every process in the set. Each PID is pinned with a
// pidfd and its membership re-checked before the signal, so a PID that
// exited and was reused between reading cgroup.procs and the kill is left
// alone.
func (c *cgroupSet) signal(sig syscall.Signal) error {
	pids, err := c.procs()
	for _, pid := range pids {
		if sErr := c.signalMember(pid, sig); sErr != nil {
			err = errors.Join(err, sErr)
		}
	}
	return err
}

func (c *cgroupSet) signalMember(pid int, sig syscall.Signal) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: pidfd_open %d: %w", c.rel, pid, err)
	}
	defer unix.Close(pidfd)
	if !inCgroup(pid, c.rel) {
		return nil
	}
	if err := unix.PidfdSendSignal(pidfd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("cgroup %s: signal pid %d: %w", c.rel, pid, err)
	}
	return nil
}

func inCgroup(pid int, rel string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	suffix := ":/" + rel
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), suffix) {
			return true
		}
	}
	return false
}

// killAll SIGKILLs everything in the set: cgroup.kill where the kernel has
// it (atomic, catches processes forking meanwhile), then each listed PID.
func (c *cgroupSet) killAll(ctx context.Context) error {
	if c.unified != "" {
		_ = os.WriteFile(filepath.Join(c.unified, "cgroup.kill"), []byte("1"), 0)
	}
	return c.signal(syscall.SIGKILL)
}

// remove kills everything in the set, waits until it is empty and removes
// the directories. A set already gone is not an error.
func (c *cgroupSet) remove(ctx context.Context) error {
	const poll = 5 * time.Millisecond
	for {
		if err := c.killAll(ctx); err != nil {
			return err
		}
		pids, err := c.procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			break
		}
		if err := sleepCtx(ctx, poll); err != nil {
			return fmt.Errorf("cgroup %s still holds pids %v: %w", c.rel, pids, err)
		}
	}
	var errs []error
	for _, dir := range c.dirs() {
		for {
			err := unix.Rmdir(dir)
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			// EBUSY right after the last process left: the kernel is still
			// tearing it down.
			if !errors.Is(err, unix.EBUSY) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
				break
			}
			if cErr := sleepCtx(ctx, poll); cErr != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w: %w", dir, err, cErr))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// oomKilled reports whether the memory controller of the set saw an OOM kill.
func (c *cgroupSet) oomKilled() bool {
	files := []string{}
	if c.unified != "" {
		files = append(files, filepath.Join(c.unified, "memory.events"))
	}
	for _, d := range c.v1 {
		files = append(files, filepath.Join(d, "memory.oom_control"))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, " ")
			if ok && k == "oom_kill" && strings.TrimSpace(v) != "0" {
				return true
			}
		}
	}
	return false
}

// cgroupSetFromPath rebuilds a task's set from the path recorded in its
// handle, refusing anything that is not a direct child of parent under a
// known hierarchy: Cleanup must never kill or remove an unrelated cgroup
// because of a corrupt record.
func cgroupSetFromPath(h hierarchies, parent, recorded string) (*cgroupSet, error) {
	clean := filepath.Clean(recorded)
	var rel string
	for _, root := range h.all() {
		if r, ok := strings.CutPrefix(clean, root+"/"); ok && (rel == "" || len(r) < len(rel)) {
			rel = r
		}
	}
	if rel == "" {
		return nil, fmt.Errorf("cgroup path %q is not under a cgroup hierarchy of this host", recorded)
	}
	if filepath.Dir(rel) != parent || filepath.Base(rel) == parent || strings.Contains(rel, "..") {
		return nil, fmt.Errorf("cgroup path %q is not a berth task cgroup (want <hierarchy>/%s/<name>)", recorded, parent)
	}
	return cgroupSetAt(h, rel), nil
}

// cgroupSetAt is the set of existing directories named rel.
func cgroupSetAt(h hierarchies, rel string) *cgroupSet {
	set := &cgroupSet{rel: rel}
	for _, root := range h.all() {
		dir := filepath.Join(root, rel)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		if root == h.unified {
			set.unified = dir
		} else {
			set.v1 = append(set.v1, dir)
		}
	}
	return set
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
