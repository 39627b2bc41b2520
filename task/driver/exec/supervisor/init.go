package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/berth/berth/internal/inherited"
	"golang.org/x/sys/unix"
)

// initMain is the task's first process: in its namespaces already (the
// supervisor cloned it into them), it joins the task's cgroup, builds the
// task's root, takes the task's user and capabilities and execs the task,
// which keeps its PID. Anything that fails is written to replyFD and the
// init exits 127; a successful exec closes replyFD (close-on-exec), which
// is how the supervisor knows the task runs.
func initMain() int {
	// Capabilities, the bounding set and keep-caps are per thread, and
	// execve takes the calling thread's credentials: all of it happens on
	// this one locked thread.
	runtime.LockOSThread()
	reply := os.NewFile(replyFD, "reply")
	fail := func(err error) int {
		// The reply pipe is the only way back to the supervisor, which
		// reaps the init's 127 and refuses the start either way.
		_, _ = reply.WriteString(err.Error())
		return 127
	}
	for _, fd := range []int{specFD, replyFD} {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			return fail(fmt.Errorf("init: fcntl: %w", err))
		}
	}
	sp, err := readSpec()
	if err != nil {
		return fail(fmt.Errorf("init: %w", err))
	}
	if sp.Cgroup != nil {
		if err := sp.Cgroup.JoinSelf(); err != nil {
			return fail(fmt.Errorf("join the task's cgroup: %w", err))
		}
	}
	if sp.OOMScoreAdj != 0 {
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(sp.OOMScoreAdj)), 0); err != nil {
			return fail(fmt.Errorf("set oom_score_adj %d: %w", sp.OOMScoreAdj, err))
		}
	}
	if sp.Root != "" {
		if err := makeRoot(sp); err != nil {
			return fail(fmt.Errorf("build the task's root %s: %w", sp.Root, err))
		}
	}
	// As root still: a working directory the task's user cannot reach by
	// path (a data dir of mode 0700) is still its working directory.
	if sp.Dir != "" {
		if err := unix.Chdir(sp.Dir); err != nil {
			return fail(fmt.Errorf("config.work_dir %q: %w", sp.Dir, err))
		}
	}
	if err := sp.Credentials.take(); err != nil {
		return fail(err)
	}
	// Nothing but stdin, stdout and stderr reaches the task: not the
	// spec, not the reply pipe, not what berth itself inherited.
	if err := inherited.CloseOnExec(3); err != nil {
		return fail(err)
	}
	err = unix.Exec(sp.Path, sp.Args, sp.Env)
	return fail(fmt.Errorf("exec %s: %w", sp.Path, err))
}

// makeRoot turns sp.Root into the task's /, in the mount namespace the
// init was cloned into: nothing mounted here reaches the host's
// namespace, and all of it goes when the task's last process exits.
func makeRoot(sp *Spec) error {
	// Stop propagation towards the host before anything is mounted. Slave,
	// not private, as runc's default root: what the host mounts later
	// below a shared mount still reaches a host-to-task volume (each
	// Mount then sets its own propagation).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / rslave: %w", err)
	}
	root := sp.Root
	// pivot_root needs the new root to be a mount point.
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", root, err)
	}
	// The task writes its root (local/, tmp/, secrets/): a setuid or
	// file-capability binary it plants there must not raise it, a device
	// node it makes (CAP_MKNOD) must not open. Nomad's chroot copy has
	// neither; its device cgroup allows only the harmless devices.
	if err := setAttr(root, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false); err != nil {
		return fmt.Errorf("make %s nosuid, nodev: %w", root, err)
	}
	for _, m := range sp.Mounts {
		if err := bindInto(root, m); err != nil {
			return err
		}
	}
	if err := mountSpecial(root); err != nil {
		return err
	}
	if err := maskHostSecrets(root); err != nil {
		return err
	}
	for _, p := range sp.Masks {
		if err := mask(root, p); err != nil {
			return err
		}
	}
	if err := unix.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root under the new one; the
	// detach then drops it, so the host's tree is not reachable at all
	// (a chroot can be left by a root process, a pivot cannot).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	return unix.Chdir("/")
}

// inRoot is dest inside root, refusing a dest that climbs out of it.
func inRoot(root, dest string) (string, error) {
	clean := filepath.Join("/", dest)
	if clean == "/" {
		return "", fmt.Errorf("mount destination %q is the root itself", dest)
	}
	return filepath.Join(root, clean), nil
}

func bindInto(root string, m Mount) error {
	target, err := inRoot(root, m.Dest)
	if err != nil {
		return err
	}
	fi, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("mount source %s: %w", m.Source, err)
	}
	if err := noLinkBelow(root, target); err != nil {
		return err
	}
	if err := mountPoint(target, fi.IsDir()); err != nil {
		return err
	}
	if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", m.Source, m.Dest, err)
	}
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if m.ReadOnly {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	if err := setAttr(target, attr, m.ReadOnly); err != nil {
		return fmt.Errorf("make %s %s: %w", m.Dest, attrName(m.ReadOnly), err)
	}
	if m.Propagation == "" {
		return nil
	}
	flag, ok := propagationFlags[m.Propagation]
	if !ok {
		return fmt.Errorf("mount %s: unknown propagation %q", m.Dest, m.Propagation)
	}
	if err := unix.Mount("", target, "", flag, ""); err != nil {
		return fmt.Errorf("make %s %s: %w", m.Dest, m.Propagation, err)
	}
	return nil
}

var propagationFlags = map[string]uintptr{
	PropagationPrivate: unix.MS_REC | unix.MS_PRIVATE,
	PropagationSlave:   unix.MS_REC | unix.MS_SLAVE,
	PropagationShared:  unix.MS_REC | unix.MS_SHARED,
}

func attrName(ro bool) string {
	if ro {
		return "read-only, nosuid, nodev"
	}
	return "nosuid, nodev"
}

// setAttr applies attr to the mount at target and every mount under it.
func setAttr(target string, attr uint64, ro bool) error {
	err := unix.MountSetattr(-1, target, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr})
	if !errors.Is(err, unix.ENOSYS) {
		return err
	}
	// Kernels before 5.12: the top mount only.
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
	if ro {
		flags |= unix.MS_RDONLY
	}
	return unix.Mount("", target, "", flags, "")
}

// noLinkBelow refuses a target whose existing directories below root
// hold a symlink: a host volume's destination may lie in a directory the
// task writes (/local, /alloc), where a link would send the mount, and
// the directories made for it, anywhere on the host.
func noLinkBelow(root, target string) error {
	rel, err := filepath.Rel(root, filepath.Dir(target))
	if err != nil || rel == "." {
		return err
	}
	p := root
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("mount point %s: %s is a symlink", target, p)
		}
	}
	return nil
}

// mountPoint makes an empty directory or file to mount on. It must not be
// a symlink: the mount would land where the link points.
func mountPoint(target string, dir bool) error {
	if fi, err := os.Lstat(target); err == nil {
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("mount point %s is a symlink", target)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	if dir {
		return os.Mkdir(target, 0o755)
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// devices are bound from the host into the task's private /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// Mount flags of the special filesystems, as Nomad's exec (libcontainer)
// mounts them.
const (
	noExecSuidDev = unix.MS_NOEXEC | unix.MS_NOSUID | unix.MS_NODEV
)

// maskedPaths and readonlyPaths are Nomad's exec driver's (its
// libcontainer config): what a task's root (uid 0, or a user with
// CAP_SETUID among its ambient capabilities) must not read, or write:
// /proc/sys/kernel/core_pattern and /proc/sysrq-trigger would run code
// as, or reboot, the host.
var (
	maskedPaths   = []string{"/proc/kcore", "/sys/firmware"}
	readonlyPaths = []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"}
)

// mountSpecial gives the new root what Nomad's exec gives its tasks: a
// /proc of the task's PID namespace (its masked and read-only paths), a
// read-only /sys of its network namespace, a /dev with the harmless
// devices only, a devpts of its own at /dev/pts (/dev/ptmx its ptmx), a
// /dev/shm of its own and a /dev/mqueue of its IPC namespace. Unlike
// Nomad's, /dev is nodev: berth has no device cgroup, so a device node a
// task with CAP_MKNOD makes there must not open (the bound devices are
// mounts of their own, not nodev); the task's root is nodev for the
// same reason (makeRoot).
func mountSpecial(root string) error {
	type special struct {
		dest, fstype, source string
		flags                uintptr
		data                 string
	}
	mount := func(m special) error {
		t := filepath.Join(root, m.dest)
		if err := mountPoint(t, true); err != nil {
			return err
		}
		if err := unix.Mount(m.source, t, m.fstype, m.flags, m.data); err != nil {
			return fmt.Errorf("mount %s: %w", m.dest, err)
		}
		return nil
	}
	for _, m := range []special{
		{"/proc", "proc", "proc", noExecSuidDev, ""},
		{"/sys", "sysfs", "sysfs", noExecSuidDev | unix.MS_RDONLY, ""},
		{"/dev", "tmpfs", "tmpfs", unix.MS_NOSUID | unix.MS_NOEXEC | unix.MS_NODEV, "mode=755,size=65536k"},
	} {
		if err := mount(m); err != nil {
			return err
		}
	}
	dev := filepath.Join(root, "dev")
	for _, d := range devices {
		src := "/dev/" + d
		if _, err := os.Stat(src); err != nil {
			continue
		}
		t := filepath.Join(dev, d)
		if err := mountPoint(t, false); err != nil {
			return err
		}
		if err := unix.Mount(src, t, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", src, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	for _, m := range []special{
		{"/dev/pts", "devpts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"},
		{"/dev/shm", "tmpfs", "shm", noExecSuidDev, "mode=1777,size=65536k"},
		{"/dev/mqueue", "mqueue", "mqueue", noExecSuidDev, ""},
	} {
		if err := mount(m); err != nil {
			return err
		}
	}
	for _, p := range maskedPaths {
		if err := mask(root, p); err != nil {
			return err
		}
	}
	for _, p := range readonlyPaths {
		if err := readOnly(root, p); err != nil {
			return err
		}
	}
	return nil
}

// hostSecrets are the host's credentials in the default chroot_env's /etc:
// password hashes, SSH host keys, TLS private keys, and /etc/berth, where
// the README puts the agent's token and TLS files. Nomad's chroot copy
// holds them all, and with Nomad's default capabilities (CAP_SETUID,
// CAP_DAC_OVERRIDE) a task as nobody reads them; berth hides them, as an
// exec task reading the agent's token could run a raw_exec job as root.
// Patterns are filepath.Match's.
var hostSecrets = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/ssh/ssh_host_*_key", "/etc/ssl/private", "/etc/berth",
}

// maskHostSecrets masks every hostSecrets path present in root.
func maskHostSecrets(root string) error {
	for _, pat := range hostSecrets {
		matches, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			return fmt.Errorf("mask %s: %w", pat, err)
		}
		for _, m := range matches {
			if err := mask(root, strings.TrimPrefix(m, root)); err != nil {
				return err
			}
		}
	}
	return nil
}

// mask hides p (as runc does): /dev/null over a file, an empty read-only
// tmpfs over a directory. A path this kernel lacks is passed over.
func mask(root, p string) error {
	t := filepath.Join(root, p)
	fi, err := os.Stat(t)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		err = unix.Mount("tmpfs", t, "tmpfs", unix.MS_RDONLY|noExecSuidDev, "size=0k,mode=555")
	} else {
		err = unix.Mount("/dev/null", t, "", unix.MS_BIND, "")
	}
	if err != nil {
		return fmt.Errorf("mask %s: %w", p, err)
	}
	return nil
}

// readOnly makes p (and what is mounted under it) read-only: bound onto
// itself, then remounted so. A path this kernel lacks is passed over.
func readOnly(root, p string) error {
	t := filepath.Join(root, p)
	if _, err := os.Stat(t); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := unix.Mount(t, t, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", p, err)
	}
	if err := setAttr(t, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, true); err != nil {
		return fmt.Errorf("make %s read-only: %w", p, err)
	}
	return nil
}
