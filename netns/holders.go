package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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
	want := fmt.Sprintf("net:[%d]", ino)
	selfMnt, _ := os.Readlink("/proc/self/ns/mnt")

	pids, err := listPIDs()
	if err != nil {
		return nil, err
	}
	var out []Holder
	seenMnt := map[string]bool{}
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		base := "/proc/" + strconv.Itoa(pid)
		comm := ""
		commOf := func() string {
			if comm == "" {
				b, _ := os.ReadFile(base + "/comm")
				comm = strings.TrimSpace(string(b))
			}
			return comm
		}
		add := func(kind HolderKind, detail string) {
			h := Holder{PID: pid, Comm: commOf(), Kind: kind, Detail: detail}
			if b, err := os.ReadFile(base + "/cmdline"); err == nil {
				h.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
			}
			out = append(out, h)
		}

		if l, err := os.Readlink(base + "/ns/net"); err == nil && l == want {
			add(HolderMember, "")
		}
		fds, _ := os.ReadDir(base + "/fd")
		for _, fd := range fds {
			l, err := os.Readlink(base + "/fd/" + fd.Name())
			if err != nil {
				continue
			}
			if l == want || l == pinPath {
				add(HolderFD, fd.Name())
			}
		}
		mnt, err := os.Readlink(base + "/ns/mnt")
		if err != nil || seenMnt[mnt] {
			continue
		}
		seenMnt[mnt] = true
		mounts, err := readMountinfo(base + "/mountinfo")
		if err != nil {
			continue
		}
		for _, mi := range mounts {
			if mi.fsType == "nsfs" && mi.root == want && !(mnt == selfMnt && mi.mountPoint == pinPath) {
				add(HolderMount, fmt.Sprintf("mounted at %s in mount namespace %s", mi.mountPoint, mnt))
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

func listPIDs() ([]int, error) {
	des, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("read /proc: %w", err)
	}
	pids := make([]int, 0, len(des))
	for _, de := range des {
		if pid, err := strconv.Atoi(de.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

type mountinfo struct {
	root       string
	mountPoint string
	optional   string
	fsType     string
}

// readMountinfo parses the fields berth needs from a mountinfo file
// (proc(5)): root (4), mount point (5), optional fields (7..) and the
// filesystem type after the "-" separator.
func readMountinfo(path string) ([]mountinfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	var out []mountinfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mountinfo{
			root:       unescapeOctal(fields[3]),
			mountPoint: filepath.Clean(unescapeOctal(fields[4])),
			optional:   strings.Join(fields[6:sep], " "),
			fsType:     fields[sep+1],
		})
	}
	return out, sc.Err()
}

// unescapeOctal undoes the \040-style escaping of spaces, tabs, newlines
// and backslashes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
