package allocdir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/berth/berth/network/evidence"
	"golang.org/x/sys/unix"
)

// An allocation directory holds one kind of mount: each task's secrets/,
// a tmpfs as in Nomad, so that what is written there (templates, tokens)
// is never on disk. It is a mount of the host's namespace (the runner
// writes into it before and while the task runs), so it outlives a
// killed agent: the runner unmounts it when the allocation ends, gc
// (sweep of kind "mount") when its allocation is terminal or unknown,
// and the Remover before it removes a directory.

// secretsSize is Nomad's size of a secrets tmpfs (1 MiB).
const secretsSize = "1m"

// mountinfo is where the mounts are read; the agent's namespace is the
// host's.
const mountinfo = "/proc/self/mountinfo"

// MountSecrets makes dir (a task's secrets/, which must exist) a tmpfs
// of mode 0700, unless it is one already (a restarted agent's task).
// Unlike Nomad's (noexec only) it is also nosuid and nodev: nothing a
// task writes there may raise it or open a device. Not root: dir stays a
// directory, as Nomad's does.
func MountSecrets(ctx context.Context, dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	ms, err := evidence.ReadMountinfo(mountinfo)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.MountPoint == dir && m.FSType == "tmpfs" {
			return nil
		}
	}
	// Mounted through a descriptor of the directory itself: mount(2)
	// follows a symlink, and a task that can write its task dir (root, or
	// Nomad's default CAP_DAC_OVERRIDE) could swap secrets/ for one
	// between a check and the mount, to put a tmpfs over a host path.
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("secrets dir %s is not a directory: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Mount("tmpfs", fmt.Sprintf("/proc/self/fd/%d", fd), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size="+secretsSize+",mode=0700"); err != nil {
		return fmt.Errorf("mount a tmpfs on secrets dir %s: %w", dir, err)
	}
	return nil
}

// Mounts are the mount points beneath root (the allocation directories'
// parent), by allocation ID, deepest first.
func Mounts(root string) (map[string][]string, error) {
	ms, err := evidence.ReadMountinfo(mountinfo)
	if err != nil {
		return nil, err
	}
	return mountsUnder(ms, root), nil
}

func mountsUnder(ms []evidence.Mount, root string) map[string][]string {
	root = filepath.Clean(root) + "/"
	out := map[string][]string{}
	seen := map[string]bool{}
	for _, m := range ms {
		rel, ok := strings.CutPrefix(m.MountPoint, root)
		if !ok || seen[m.MountPoint] {
			continue
		}
		id, _, _ := strings.Cut(rel, "/")
		if !idRE().MatchString(id) {
			continue
		}
		seen[m.MountPoint] = true
		out[id] = append(out[id], m.MountPoint)
	}
	for _, ps := range out {
		// Deepest first: a mount under another goes before it.
		sort.Slice(ps, func(i, j int) bool { return len(ps[i]) > len(ps[j]) })
	}
	return out
}

// Unmount unmounts every mount at or beneath dir (an allocation
// directory), deepest first; a mount stacked twice is unmounted twice.
// Nothing mounted is no error.
func Unmount(ctx context.Context, dir string) error {
	dir = filepath.Clean(dir)
	for range 16 {
		if err := ctx.Err(); err != nil {
			return err
		}
		ms, err := evidence.ReadMountinfo(mountinfo)
		if err != nil {
			return err
		}
		var ps []string
		for _, m := range ms {
			if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
				ps = append(ps, m.MountPoint)
			}
		}
		if len(ps) == 0 {
			return nil
		}
		sort.Slice(ps, func(i, j int) bool { return len(ps[i]) > len(ps[j]) })
		for _, p := range ps {
			// Detached: a process still in the directory (a task's
			// leftover being killed) does not hold its allocation's
			// end; its view goes with it.
			if err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
		}
	}
	return fmt.Errorf("unmount the mounts beneath %s: still mounted after 16 rounds", dir)
}
