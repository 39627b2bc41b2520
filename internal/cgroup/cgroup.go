// Package cgroup makes, limits, signals and removes a task's cgroup: the
// same relative path in every hierarchy the host mounts (cgroup2, and the
// v1 memory, pids and cpu controllers of a hybrid host). The driver and
// the task supervisor share it: the driver creates and limits the cgroup,
// the supervisor starts the task in it and kills what is left in it when
// the task ends.
package cgroup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// V1Controllers are the cgroup v1 hierarchies a task gets a cgroup in, when
// mounted and writable.
var V1Controllers = []string{"memory", "pids", "cpu"}

// Hierarchies is where cgroup trees are mounted on this host.
type Hierarchies struct {
	// Unified is the cgroup2 mount: the root itself on a pure v2 host,
	// <root>/unified on a hybrid one, empty if there is none.
	Unified string
	// PureV2 is true when root itself is cgroup2.
	PureV2 bool
	// V1 holds <root>/<controller> for each mounted v1 controller.
	V1 []string
}

// All lists every hierarchy, cgroup2 first.
func (h Hierarchies) All() []string {
	var out []string
	if h.Unified != "" {
		out = append(out, h.Unified)
	}
	return append(out, h.V1...)
}

func fsMagic(path string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0
	}
	return int64(st.Type)
}

// Detect finds the hierarchies mounted under root (/sys/fs/cgroup).
func Detect(root string) Hierarchies {
	if fsMagic(root) == unix.CGROUP2_SUPER_MAGIC {
		return Hierarchies{Unified: root, PureV2: true}
	}
	var h Hierarchies
	if p := filepath.Join(root, "unified"); fsMagic(p) == unix.CGROUP2_SUPER_MAGIC {
		h.Unified = p
	}
	for _, c := range V1Controllers {
		p := filepath.Join(root, c)
		if fsMagic(p) == unix.CGROUP_SUPER_MAGIC {
			h.V1 = append(h.V1, p)
		}
	}
	return h
}

// Set is one task's cgroup, the same relative path in every
// hierarchy where it could be created.
type Set struct {
	Rel     string // e.g. berth/<store>.<alloc>.<task>
	Unified string // absolute directory in the cgroup2 tree, or ""
	V1      []string
}

// Primary is the path recorded in the task handle.
func (c *Set) Primary() string {
	if c.Unified != "" {
		return c.Unified
	}
	return c.V1[0]
}

func (c *Set) Dirs() []string {
	var out []string
	if c.Unified != "" {
		out = append(out, c.Unified)
	}
	return append(out, c.V1...)
}

// Create makes rel in every hierarchy it can. It returns nil and the
// reasons when none could be made: running without a cgroup is allowed.
//
// The directories are always fresh: a leftover of the same name (a task
// with the same alloc and name whose berth died before removing it) is
// emptied and removed first. Reusing it would not only inherit stale
// processes: on the kernel measured here (6.18), once "1" was written to a
// cgroup's cgroup.kill, every later clone3(CLONE_INTO_CGROUP) into that
// cgroup is SIGKILLed at birth.
func Create(ctx context.Context, h Hierarchies, rel string) (*Set, error) {
	if old := At(h, rel); len(old.Dirs()) > 0 {
		if err := old.Remove(ctx); err != nil {
			return nil, fmt.Errorf("remove leftover cgroup %s: %w", rel, err)
		}
	}
	set := &Set{Rel: rel}
	var errs []error
	for _, root := range h.All() {
		if err := ctx.Err(); err != nil {
			return cleanupPartial(ctx, set, err)
		}
		dir := filepath.Join(root, rel)
		if h.PureV2 && root == h.Unified {
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
		if root == h.Unified {
			set.Unified = dir
		} else {
			set.V1 = append(set.V1, dir)
		}
	}
	if set.Unified == "" && len(set.V1) == 0 {
		return nil, errors.Join(errs...)
	}
	return set, errors.Join(errs...)
}

// cleanupPartial removes what a cancelled Create made, on a context of its
// own: ctx is what ended.
func cleanupPartial(ctx context.Context, set *Set, err error) (*Set, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if rErr := set.Remove(cctx); rErr != nil {
		err = errors.Join(err, rErr)
	}
	return nil, err
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
		for _, c := range V1Controllers {
			_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
		}
	}
}

// OpenUnified opens the cgroup2 directory for clone3's CLONE_INTO_CGROUP,
// or returns -1.
func (c *Set) OpenUnified() (int, error) {
	if c == nil || c.Unified == "" {
		return -1, nil
	}
	fd, err := unix.Open(c.Unified, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open cgroup %s: %w", c.Unified, err)
	}
	return fd, nil
}

// Join moves pid into every cgroup of the set, skipping skipUnified.
func (c *Set) Join(pid int, skipUnified bool) error {
	var errs []error
	for _, dir := range c.Dirs() {
		if skipUnified && dir == c.Unified {
			continue
		}
		p := filepath.Join(dir, "cgroup.procs")
		if err := os.WriteFile(p, []byte(strconv.Itoa(pid)), 0); err != nil {
			errs = append(errs, fmt.Errorf("move pid %d into %s: %w", pid, p, err))
		}
	}
	return errors.Join(errs...)
}

// Procs lists the PIDs in any cgroup of the set (zombies are not listed).
func (c *Set) Procs() ([]int, error) {
	seen := map[int]bool{}
	var out []int
	var errs []error
	for _, dir := range c.Dirs() {
		p := filepath.Join(dir, "cgroup.procs")
		b, err := os.ReadFile(p)
		if err != nil {
			// ENODEV: the cgroup is being removed (by the task's
			// supervisor, say), which is as good as gone.
			if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENODEV) {
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

// Signal sends sig to every process in the set. Each PID is pinned with a
// pidfd and its membership re-checked before the signal, so a PID that
// exited and was reused between reading cgroup.procs and the kill is left
// alone.
func (c *Set) Signal(sig syscall.Signal) error {
	pids, err := c.Procs()
	for _, pid := range pids {
		if sErr := c.signalMember(pid, sig); sErr != nil {
			err = errors.Join(err, sErr)
		}
	}
	return err
}

func (c *Set) signalMember(pid int, sig syscall.Signal) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup %s: pidfd_open %d: %w", c.Rel, pid, err)
	}
	defer unix.Close(pidfd)
	if !inCgroup(pid, c.Rel) {
		return nil
	}
	if err := unix.PidfdSendSignal(pidfd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("cgroup %s: signal pid %d: %w", c.Rel, pid, err)
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

// KillAll SIGKILLs everything in the set: cgroup.kill where the kernel has
// it (atomic, catches processes forking meanwhile), then each listed PID.
func (c *Set) KillAll(ctx context.Context) error {
	if c.Unified != "" {
		_ = os.WriteFile(filepath.Join(c.Unified, "cgroup.kill"), []byte("1"), 0)
	}
	return c.Signal(syscall.SIGKILL)
}

// Remove kills everything in the set, waits until it is empty and removes
// the directories. A set already gone is not an error.
func (c *Set) Remove(ctx context.Context) error {
	const poll = 5 * time.Millisecond
	for {
		if err := c.KillAll(ctx); err != nil {
			return err
		}
		pids, err := c.Procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			break
		}
		if err := sleepCtx(ctx, poll); err != nil {
			return fmt.Errorf("cgroup %s still holds pids %v: %w", c.Rel, pids, err)
		}
	}
	var errs []error
	for _, dir := range c.Dirs() {
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

// OOMKilled reports whether the memory controller of the set saw an OOM kill.
func (c *Set) OOMKilled() bool {
	files := []string{}
	if c.Unified != "" {
		files = append(files, filepath.Join(c.Unified, "memory.events"))
	}
	for _, d := range c.V1 {
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

// FromPath rebuilds a task's set from the path recorded in its
// handle, refusing anything that is not a direct child of parent under a
// known hierarchy: Cleanup must never kill or remove an unrelated cgroup
// because of a corrupt record.
func FromPath(h Hierarchies, parent, recorded string) (*Set, error) {
	clean := filepath.Clean(recorded)
	var rel string
	for _, root := range h.All() {
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
	return At(h, rel), nil
}

// At is the set of existing directories named rel.
func At(h Hierarchies, rel string) *Set {
	set := &Set{Rel: rel}
	for _, root := range h.All() {
		dir := filepath.Join(root, rel)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		if root == h.Unified {
			set.Unified = dir
		} else {
			set.V1 = append(set.V1, dir)
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

// JoinSelf moves the calling process into every cgroup of the set ("0"
// is the writer in cgroup.procs). A task's init calls it before it execs
// the task: joining from the inside leaves no window in which the task, or
// anything it forks, runs outside them (v1 hierarchies cannot be joined at
// clone time at all).
func (c *Set) JoinSelf() error {
	var errs []error
	for _, dir := range c.Dirs() {
		p := filepath.Join(dir, "cgroup.procs")
		if err := os.WriteFile(p, []byte("0"), 0); err != nil {
			errs = append(errs, fmt.Errorf("join %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// ErrNoController is returned by SetLimits when a limit was asked for and
// no hierarchy of the set has the controller to enforce it.
var ErrNoController = errors.New("no cgroup controller to enforce it")

// Limits are what a task's cgroup enforces. Zero values mean no limit.
type Limits struct {
	// MemoryMax is the hard limit in bytes: past it the kernel reclaims
	// and then OOM-kills inside the cgroup.
	MemoryMax int64
	// MemorySoft is the soft limit in bytes (v1 soft_limit_in_bytes, v2
	// memory.low): what the task keeps under memory pressure.
	MemorySoft int64
	// CPUShares is the task's relative CPU weight, Nomad's convention:
	// its cpu resource in MHz (v1 cpu.shares; v2 cpu.weight scaled).
	CPUShares int
}

// SetLimits writes l into every hierarchy of the set that has the
// controller. It reports ErrNoController for a limit no hierarchy could
// take, and any write that failed.
func (c *Set) SetLimits(l Limits) error {
	var errs []error
	memDone, softDone, cpuDone := false, false, false
	write := func(dir, file, val string) bool {
		p := filepath.Join(dir, file)
		if _, err := os.Stat(p); err != nil {
			return false
		}
		if err := os.WriteFile(p, []byte(val), 0); err != nil {
			errs = append(errs, fmt.Errorf("write %s = %s: %w", p, val, err))
			return false
		}
		return true
	}
	for _, dir := range c.Dirs() {
		v2 := dir == c.Unified
		if l.MemoryMax > 0 {
			file := "memory.limit_in_bytes"
			if v2 {
				file = "memory.max"
			}
			memDone = write(dir, file, strconv.FormatInt(l.MemoryMax, 10)) || memDone
		}
		if l.MemorySoft > 0 {
			file := "memory.soft_limit_in_bytes"
			if v2 {
				file = "memory.low"
			}
			softDone = write(dir, file, strconv.FormatInt(l.MemorySoft, 10)) || softDone
		}
		if l.CPUShares > 0 {
			shares := min(max(l.CPUShares, 2), 262144)
			if v2 {
				// The kernel's own mapping of shares [2, 262144] to
				// weight [1, 10000].
				weight := 1 + ((shares-2)*9999)/262142
				cpuDone = write(dir, "cpu.weight", strconv.Itoa(weight)) || cpuDone
			} else {
				cpuDone = write(dir, "cpu.shares", strconv.Itoa(shares)) || cpuDone
			}
		}
	}
	if l.MemoryMax > 0 && !memDone {
		errs = append(errs, fmt.Errorf("cgroup %s: memory limit %d bytes: %w", c.Rel, l.MemoryMax, ErrNoController))
	}
	if l.MemorySoft > 0 && !softDone {
		errs = append(errs, fmt.Errorf("cgroup %s: memory soft limit %d bytes: %w", c.Rel, l.MemorySoft, ErrNoController))
	}
	if l.CPUShares > 0 && !cpuDone {
		errs = append(errs, fmt.Errorf("cgroup %s: cpu shares %d: %w", c.Rel, l.CPUShares, ErrNoController))
	}
	return errors.Join(errs...)
}

// Children lists the names of the cgroups directly under parent in any
// hierarchy, sorted and without duplicates.
func Children(h Hierarchies, parent string) ([]string, error) {
	seen := map[string]bool{}
	var errs []error
	for _, root := range h.All() {
		des, err := os.ReadDir(filepath.Join(root, parent))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("list cgroups under %s: %w", filepath.Join(root, parent), err))
			continue
		}
		for _, de := range des {
			if de.IsDir() {
				seen[de.Name()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, errors.Join(errs...)
}
