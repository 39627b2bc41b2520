package evidence

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The /proc entries that say who keeps a namespace busy or alive (see
// netns.Holders): a process's namespaces, its open fds and its mounts.

func procPath(pid int, rest string) string { return "/proc/" + strconv.Itoa(pid) + "/" + rest }

// Namespace is the link /proc/<pid>/ns/<kind> points to, such as
// "net:[4026531840]": two processes share a namespace when theirs are equal.
func Namespace(pid int, kind string) (string, error) {
	return os.Readlink(procPath(pid, "ns/"+kind))
}

// NetnsLink is the form Namespace and FDs take for the network namespace
// with inode ino.
func NetnsLink(ino uint64) string { return fmt.Sprintf("net:[%d]", ino) }

// FD is one open file descriptor of a process.
type FD struct {
	Num string
	// Target is what the fd's link points to: a path, or a namespace
	// ("net:[<inode>]").
	Target string
}

// FDs lists a process's open fds; fds closed while they are listed are
// left out, and a process that is gone has none.
func FDs(pid int) []FD {
	des, _ := os.ReadDir(procPath(pid, "fd"))
	out := make([]FD, 0, len(des))
	for _, de := range des {
		l, err := os.Readlink(procPath(pid, "fd/"+de.Name()))
		if err != nil {
			continue
		}
		out = append(out, FD{Num: de.Name(), Target: l})
	}
	return out
}

// Mounts reads the mountinfo of the process's mount namespace.
func Mounts(pid int) ([]Mount, error) { return ReadMountinfo(procPath(pid, "mountinfo")) }

// Comm is the process's command name, "" once it is gone.
func Comm(pid int) string {
	b, _ := os.ReadFile(procPath(pid, "comm"))
	return strings.TrimSpace(string(b))
}

// Cmdline is the process's command line, arguments joined by spaces; ""
// for a kernel thread or a process that is gone.
func Cmdline(pid int) string {
	b, _ := os.ReadFile(procPath(pid, "cmdline"))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}
