package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/network/evidence"
)

// HolderKind says how a process keeps a namespace busy or alive.
type HolderKind string

const (
	// HolderFD: the process has a file descriptor open on the namespace;
	// a plain unmount fails with EBUSY.
	HolderFD HolderKind = "fd"
	// HolderMount: the namespace is mounted in another mount namespace
	// (a private copy of the pin); it stays alive until that is unmounted.
	HolderMount HolderKind = "mount"
	// HolderMember: the process lives in the namespace; the namespace
	// survives the removal of its pin until the process exits.
	HolderMember HolderKind = "member"
)

// Holder is one process that keeps a namespace busy or alive.
type Holder struct {
	PID     int        `json:"pid"`
	Comm    string     `json:"comm"`
	Cmdline string     `json:"cmdline,omitempty"`
	Kind    HolderKind `json:"kind"`
	// Detail is the fd number, or the mount point in the other mount namespace.
	Detail string `json:"detail,omitempty"`
}

func (h Holder) String() string {
	s := fmt.Sprintf("pid %d (%s) %s", h.PID, h.Comm, h.Kind)
	if h.Detail != "" {
		s += " " + h.Detail
	}
	return s
}

// Holders lists the processes that keep the namespace pinned at path busy
// or alive: open fds on it, mounts of it in other mount namespaces, and
// processes living in it. A path that is not pinned has no holders.
func Holders(ctx context.Context, path string) ([]Holder, error) {
	pinned, err := IsPinned(path)
	if err != nil || !pinned {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("holders of %s: %w", path, err)
	}
	return HoldersOfInode(ctx, st.Ino, path)
}

// HoldersOfInode scans /proc for holders of the network namespace with
// inode ino. pinPath is the pin itself, which is not reported as a mount
// holder in berth's own mount namespace.
func HoldersOfInode(ctx context.Context, ino uint64, pinPath string) ([]Holder, error) {
	want := evidence.NetnsLink(ino)
	selfMnt, _ := evidence.Namespace(os.Getpid(), "mnt")

	pids, err := proc.PIDs()
	if err != nil {
		return nil, err
	}
	var out []Holder
	seenMnt := map[string]bool{}
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		comm := ""
		add := func(kind HolderKind, detail string) {
			if comm == "" {
				comm = evidence.Comm(pid)
			}
			out = append(out, Holder{PID: pid, Comm: comm, Cmdline: evidence.Cmdline(pid), Kind: kind, Detail: detail})
		}

		if l, err := evidence.Namespace(pid, "net"); err == nil && l == want {
			add(HolderMember, "")
		}
		for _, fd := range evidence.FDs(pid) {
			if fd.Target == want || fd.Target == pinPath {
				add(HolderFD, fd.Num)
			}
		}
		mnt, err := evidence.Namespace(pid, "mnt")
		if err != nil || seenMnt[mnt] {
			continue
		}
		seenMnt[mnt] = true
		mounts, err := evidence.Mounts(pid)
		if err != nil {
			continue
		}
		for _, mi := range mounts {
			if mi.FSType == "nsfs" && mi.Root == want && !(mnt == selfMnt && mi.MountPoint == pinPath) {
				add(HolderMount, fmt.Sprintf("mounted at %s in mount namespace %s", mi.MountPoint, mnt))
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// Members maps the inode of every network namespace some process lives in
// to those processes, from one pass over /proc: a caller judging many
// namespaces asks it once instead of scanning /proc for each. Processes
// that exit while it reads are left out.
func Members(ctx context.Context) (map[uint64][]Holder, error) {
	pids, err := proc.PIDs()
	if err != nil {
		return nil, err
	}
	out := map[uint64][]Holder{}
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l, err := evidence.Namespace(pid, "net")
		if err != nil {
			continue
		}
		var ino uint64
		if _, err := fmt.Sscanf(l, "net:[%d]", &ino); err != nil {
			continue
		}
		out[ino] = append(out[ino], Holder{PID: pid, Comm: evidence.Comm(pid), Kind: HolderMember})
	}
	return out, nil
}
