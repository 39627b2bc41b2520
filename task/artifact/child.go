package artifact

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"github.com/berth/berth/internal/beneath"
	"golang.org/x/sys/unix"
)

// The child's two stages, as arguments of the fetcher binary (berth-fetch).
const (
	// StageCommand is the first: started by the runner as root, it builds
	// the sandbox, drops to the task's user and execs the second.
	StageCommand = "fetch"
	sandboxed    = "fetch-sandboxed"
)

// The file descriptors the runner hands the child.
const (
	specFD   = 3 // the Spec, a memfd read from offset 0
	reportFD = 4 // "progress" once the first bytes are in, "err <quoted>" on failure
	destFD   = 5 // the destination directory (O_PATH)
	srcFD    = 6 // the local source's directory (O_PATH), /dev/null for a URL
)

// IsStage reports whether the fetcher binary was started as a fetch child
// (its argv[1]).
func IsStage(arg string) bool { return arg == StageCommand || arg == sandboxed }

// ChildMain is the fetch child's main (berth-fetch fetch ALLOC TASK).
func ChildMain(args []string) int {
	report := os.NewFile(reportFD, "report")
	fail := func(err error) int {
		_, _ = report.WriteString("err " + strconv.Quote(err.Error()) + "\n")
		return 1
	}
	spec, err := readSpec()
	if err != nil {
		return fail(err)
	}
	if len(args) < 4 || args[2] != spec.AllocID || args[3] != spec.Task {
		return fail(fmt.Errorf("command line %q does not match the spec's %s/%s", args, spec.AllocID, spec.Task))
	}
	if args[1] == StageCommand {
		return fail(enterSandbox(spec, args))
	}
	if err := checkNoCaps(); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), spec.Limits.HTTPReadTimeout)
	defer cancel()
	f := &fetcher{spec: spec, dest: &dest{dir: beneath.FromFD(destFD, "destination"), budget: newBudget(spec.Limits)}, srcDir: srcFD}
	told := false
	f.progress = func() {
		if !told {
			told = true
			_, _ = report.WriteString("progress\n")
		}
	}
	if err := f.run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

func readSpec() (*Spec, error) {
	var b []byte
	buf := make([]byte, 16<<10)
	for off := int64(0); ; {
		n, err := unix.Pread(specFD, buf, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the fetch spec: %w", err)
		}
		if n == 0 {
			break
		}
		b = append(b, buf[:n]...)
		off += int64(n)
	}
	s := &Spec{}
	if err := jsonUnmarshal(b, s); err != nil {
		return nil, fmt.Errorf("fetch spec: %w", err)
	}
	s.Limits = s.Limits.orDefault()
	return s, nil
}

// systemReads are what a download may read of the host: name resolution
// and the TLS roots of the common distributions.
var systemReads = []string{
	"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/services",
	"/etc/ssl", "/etc/pki", "/etc/ca-certificates", "/usr/share/ca-certificates", "/usr/local/share/ca-certificates",
	"/etc/ca-certificates.conf",
}

// loaderReads are what exec'ing the binary reads besides it: the dynamic
// loader and the libraries it maps.
var loaderReads = []string{"/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32", "/etc/ld.so.cache", "/etc/ld.so.preload"}

// enterSandbox is the first stage, on one locked thread: the Landlock
// ruleset built from the handed-over directories, the file size limit,
// then the task's user without any capability (securebits keep uid 0
// from regaining them), no_new_privs, the ruleset enforced, and the
// second stage exec'd, which inherits all of it on every thread. It
// returns only on failure.
func enterSandbox(s *Spec, args []string) error {
	runtime.LockOSThread()
	ppid := os.Getppid()
	// The binary, opened now: the second stage is exec'd by this fd, which
	// the task's user may reach where its path is not (a 0700 directory).
	self, err := unix.Open("/proc/self/exe", unix.O_PATH, 0)
	if err != nil {
		return fmt.Errorf("open /proc/self/exe: %w", err)
	}
	var rs *ruleset
	if s.Landlock {
		abi := LandlockABI()
		if abi == 0 {
			return errors.New("the runner asked for Landlock, which this kernel does not offer")
		}
		if rs, err = newRuleset(abi, s.URL == ""); err != nil {
			return err
		}
		if err := rs.allow(destFD, writeRights(abi), true); err != nil {
			return fmt.Errorf("destination: %w", err)
		}
		if s.URL == "" {
			// O_PATH: the user's right to read it is checked by the second
			// stage's open; this only names it for the ruleset.
			fd, err := unix.Openat(srcFD, s.LocalName, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				var st unix.Stat_t
				_ = unix.Fstat(fd, &st)
				err = rs.allow(fd, fsRead, st.Mode&unix.S_IFMT == unix.S_IFDIR)
				unix.Close(fd)
				if err != nil {
					return fmt.Errorf("source: %w", err)
				}
			}
		} else {
			for _, p := range systemReads {
				fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
				if err != nil {
					continue
				}
				var st unix.Stat_t
				_ = unix.Fstat(fd, &st)
				err = rs.allow(fd, fsRead, st.Mode&unix.S_IFMT == unix.S_IFDIR)
				unix.Close(fd)
				if err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
			}
		}
		if err := rs.allow(self, unix.LANDLOCK_ACCESS_FS_EXECUTE|unix.LANDLOCK_ACCESS_FS_READ_FILE, false); err != nil {
			return fmt.Errorf("the helper binary: %w", err)
		}
		// The dynamic loader and the C library the binary may link.
		for _, p := range loaderReads {
			fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			var st unix.Stat_t
			_ = unix.Fstat(fd, &st)
			err = rs.allow(fd, unix.LANDLOCK_ACCESS_FS_EXECUTE|fsRead, st.Mode&unix.S_IFMT == unix.S_IFDIR)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	// A backstop under the budget: no file grows past the largest limit.
	max := s.Limits.DecompressionSizeLimit
	if s.Limits.HTTPMaxSize > max {
		max = s.Limits.HTTPMaxSize
	}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: uint64(max) + 1, Max: uint64(max) + 1}); err != nil {
		return fmt.Errorf("RLIMIT_FSIZE: %w", err)
	}
	if err := dropPrivileges(s.UID, s.GID, s.Groups, ppid); err != nil {
		return err
	}
	if rs != nil {
		if err := rs.restrict(); err != nil {
			return err
		}
	}
	argv := append([]string{args[0], sandboxed}, args[2:]...)
	err = syscall.Exec("/proc/self/fd/"+strconv.Itoa(self), argv, []string{"GOMAXPROCS=2", "TZ=UTC"})
	return fmt.Errorf("exec the sandboxed fetch: %w", err)
}

// dropPrivileges makes this thread uid/gid/groups with no capability in
// any set, for good: raw system calls, which Go's wrappers would apply to
// every thread (pointless before an exec).
func dropPrivileges(uid, gid int, groups []int, ppid int) error {
	// SECBIT_NOROOT(_LOCKED): uid 0 gains nothing at exec;
	// SECBIT_KEEP_CAPS_LOCKED (KEEP_CAPS off): none kept across setuid;
	// SECBIT_NO_CAP_AMBIENT_RAISE(_LOCKED).
	const secbits = 0x1 | 0x2 | 0x20 | 0x40 | 0x80
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, secbits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	var gp uintptr
	if len(gs) > 0 {
		gp = uintptrOf(&gs[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), gp, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", uid, e)
	}
	var none [2]unix.CapUserData
	if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &none[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// A change of uid clears the parent-death signal: set again, and if
	// the runner died meanwhile, stop here.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if os.Getppid() != ppid {
		return errors.New("the runner is gone")
	}
	return nil
}

// checkNoCaps makes sure the second stage holds no capability.
func checkNoCaps() error {
	var d [2]unix.CapUserData
	if err := unix.Capget(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &d[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, x := range d {
		if x.Effective|x.Permitted|x.Inheritable != 0 {
			return fmt.Errorf("the sandboxed fetch holds capabilities %#x/%#x", d[0].Permitted, d[1].Permitted)
		}
	}
	return nil
}
