package supervisor

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary is also berth-supervisor (run as that name, it is
// Main: the supervisor re-execs /proc/self/exe as its task's init) and
// the task or command under test (run as reportName, it writes what it
// sees as one line of JSON on stdout).
const reportName = "berth-report"

func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case Binary:
		os.Exit(Main(os.Args))
	case reportName:
		os.Exit(reportMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// report is what a task's or a command's process sees of itself.
type report struct {
	PID int
	// Status is /proc/self/status (Uid, Gid, Groups, Cap*, NoNewPrivs,
	// Seccomp...).
	Status map[string]string
	// FDs are its open descriptors and what they are.
	FDs map[int]string
	// NS are its namespaces (/proc/self/ns/*).
	NS map[string]string
	// Mounts is /proc/self/mountinfo.
	Mounts []mountInfo
	Cwd    string
	// Dev lists /dev.
	Dev []string
	// Exists and Writes: each path asked (-exists, -write) and the error
	// of a stat or of creating a file there ("" if none).
	Exists map[string]string
	Writes map[string]string
	// Unshare is the error of unshare(CLONE_NEWUSER): EPERM under the
	// seccomp filter.
	Unshare string
}

type mountInfo struct {
	Root, Point, Options, FSType, Super string
}

// reportMain is the task: args are paths to probe ("exists:/p",
// "write:/p"), "sleep" to stay until killed, "orphan" to leave a child
// behind in a session of its own.
func reportMain(args []string) int {
	r := report{PID: os.Getpid(), Exists: map[string]string{}, Writes: map[string]string{}}
	// First, before the Go runtime or this function opens anything.
	fds, err := openFDs()
	if err != nil {
		return fatal(err)
	}
	r.FDs = fds
	r.Status = procStatus(mustRead("/proc/self/status"))
	r.Mounts = parseMountInfo(mustRead("/proc/self/mountinfo"))
	r.NS = map[string]string{}
	for _, ns := range []string{"mnt", "pid", "ipc", "net", "user"} {
		r.NS[ns], _ = os.Readlink("/proc/self/ns/" + ns)
	}
	r.Cwd, _ = os.Getwd()
	if ents, err := os.ReadDir("/dev"); err == nil {
		for _, e := range ents {
			r.Dev = append(r.Dev, e.Name())
		}
	}
	r.Unshare = errString(unix.Unshare(unix.CLONE_NEWUSER))
	sleep := false
	for _, a := range args {
		switch {
		case a == "sleep":
			sleep = true
		case strings.HasPrefix(a, "exists:"):
			_, err := os.Stat(a[len("exists:"):])
			r.Exists[a[len("exists:"):]] = errString(err)
		case strings.HasPrefix(a, "write:"):
			p := a[len("write:"):]
			r.Writes[p] = errString(os.WriteFile(p, []byte("x"), 0o644))
		}
	}
	b, _ := json.Marshal(r)
	os.Stdout.Write(append(b, '\n'))
	if slices.Contains(args, "orphan") {
		// A child in a session of its own, left running: out of the
		// task's process group, only its cgroup still holds it.
		child := exec.Command("/proc/self/exe", "sleep")
		child.Args[0] = reportName
		child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := child.Start(); err != nil {
			return fatal(err)
		}
		os.Stdout.WriteString("orphan " + strconv.Itoa(child.Process.Pid) + "\n")
	}
	for sleep {
		unix.Pause()
	}
	return 0
}

// openFDs lists the descriptors this process got from the one that
// exec'd it, with raw calls: /proc/self/fd less the directory's own.
func openFDs() (map[int]string, error) {
	dfd, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	buf := make([]byte, 8192)
	out := map[int]string{}
	for {
		n, err := unix.Getdents(dfd, buf)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			fd, err := strconv.Atoi(name)
			if err != nil || fd == dfd {
				continue
			}
			// Close-on-exec ones are this process's own (the Go
			// runtime keeps cgroup files open to follow the CPU
			// limit): only one without the flag came through execve.
			if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC != 0 {
				continue
			}
			lbuf := make([]byte, 4096)
			ln, _ := unix.Readlinkat(dfd, name, lbuf)
			out[fd] = string(lbuf[:max(ln, 0)])
		}
	}
}

func mustRead(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		os.Exit(fatal(err))
	}
	return string(b)
}

func fatal(err error) int {
	os.Stdout.WriteString("report: " + err.Error() + "\n")
	return 3
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func procStatus(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// parseMountInfo reads mountinfo lines: "id parent maj:min root point
// options [optional...] - fstype source super".
func parseMountInfo(s string) []mountInfo {
	var out []mountInfo
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		m := mountInfo{Root: f[3], Point: f[4], Options: f[5]}
		for i := 6; i < len(f)-2; i++ {
			if f[i] == "-" {
				m.FSType, m.Super = f[i+1], f[len(f)-1]
				break
			}
		}
		out = append(out, m)
	}
	return out
}
