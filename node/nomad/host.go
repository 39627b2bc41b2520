package nomad

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth/berth/internal/proc"
	"github.com/berth/berth/network/evidence"
)

// ClientHost is what this host says of its Nomad client, read from the
// data dir the operator configured: the node ID the client recorded
// there, and the process that holds the client's state database open (the
// running client). Nothing in it comes from Nomad's API: an API answer is
// trusted only when it matches it.
type ClientHost struct {
	// DataDir is the agent's data_dir (Settings.DataDir).
	DataDir string
	// NodeID is <data_dir>/client/client-id.
	NodeID string
	// PID is the process holding <data_dir>/client/state.db open, 0 when
	// none does (the client is not running); Started is when it started.
	PID     int
	Started time.Time
	// startTicks is the process's start in clock ticks since boot
	// (/proc/<pid>/stat), which tells a reused PID apart.
	startTicks uint64
}

// StateDir is the client's state dir.
func (h *ClientHost) StateDir() string { return filepath.Join(h.DataDir, "client") }

// AllocDir is where the client keeps an allocation's directory while it
// holds the allocation.
func (h *ClientHost) AllocDir(id string) string { return filepath.Join(h.DataDir, "alloc", id) }

// ErrUntrustedState: a file or directory of Nomad's client state could be
// written by someone other than root, so it proves nothing.
var ErrUntrustedState = errors.New("the client state of Nomad is not root's alone")

// ReadClientHost reads the client's identity under dataDir. The data dir,
// its client dir and the files read must be root's and writable by root
// alone (as Nomad makes them): anyone else could have planted them.
func ReadClientHost(ctx context.Context, dataDir string) (*ClientHost, error) {
	h := &ClientHost{DataDir: filepath.Clean(dataDir)}
	idFile := filepath.Join(h.StateDir(), "client-id")
	if err := rootOnly(idFile, false); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(idFile)
	if err != nil {
		return nil, fmt.Errorf("nomad client state: %w", err)
	}
	h.NodeID = strings.TrimSpace(string(b))
	if !allocID.MatchString(h.NodeID) {
		return nil, fmt.Errorf("nomad client state: %s holds %q, not a node ID", idFile, h.NodeID)
	}
	db := filepath.Join(h.StateDir(), "state.db")
	if err := rootOnly(db, false); err != nil {
		return nil, err
	}
	pid, err := holderOf(ctx, db)
	if err != nil {
		return nil, err
	}
	if pid > 0 {
		if ticks, ok := procStart(pid); ok {
			h.PID, h.startTicks, h.Started = pid, ticks, ticksToTime(ticks)
		}
	}
	return h, nil
}

// Alive reports whether the client process read by ReadClientHost still
// runs (same PID, same start): when it does not, the client was killed
// or restarted, and no teardown of an allocation it had will come.
func (h *ClientHost) Alive() bool {
	if h.PID == 0 {
		return false
	}
	ticks, ok := procStart(h.PID)
	return ok && ticks == h.startTicks
}

// rootOnly checks that path (a regular file, or a dir when dir is set)
// and every directory above it are root's and writable by nobody else
// (a sticky directory such as /tmp excepted), without following a
// symlink at path itself.
func rootOnly(path string, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("nomad client state: %w", err)
	}
	switch {
	case dir && !fi.IsDir(), !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%s is a %s: %w", path, fi.Mode().Type(), ErrUntrustedState)
	}
	if err := rootOwned(path, fi); err != nil {
		return err
	}
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("nomad client state: %w", err)
		}
		if err := rootOwned(d, fi); err != nil {
			return err
		}
		if d == "/" {
			return nil
		}
	}
}

func rootOwned(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 {
		return fmt.Errorf("%s is not owned by root: %w", path, ErrUntrustedState)
	}
	if fi.Mode().Perm()&0o022 != 0 && !(fi.IsDir() && fi.Mode()&os.ModeSticky != 0) {
		return fmt.Errorf("%s is writable by others than root (mode %s): %w", path, fi.Mode(), ErrUntrustedState)
	}
	return nil
}

// holderOf is the process that has path open (the lowest PID of those
// that have), 0 when none does.
func holderOf(ctx context.Context, path string) (int, error) {
	want, err := filepath.EvalSymlinks(path)
	if err != nil {
		return 0, fmt.Errorf("nomad client state: %w", err)
	}
	pids, err := proc.PIDs()
	if err != nil {
		return 0, err
	}
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		for _, fd := range evidence.FDs(pid) {
			if fd.Target == want {
				return pid, nil
			}
		}
	}
	return 0, nil
}

// procStart is a process's start time in clock ticks since boot (field 22
// of /proc/<pid>/stat).
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field 22 is f[19].
	if len(f) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

func ticksToTime(ticks uint64) time.Time {
	boot := bootTime()
	if boot.IsZero() {
		return time.Time{}
	}
	return boot.Add(time.Duration(ticks) * time.Second / clockTicks)
}

// bootTime is /proc/stat's btime.
func bootTime() time.Time {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(n, 0)
			}
		}
	}
	return time.Time{}
}

// servesAPI checks that the client process listens on the address the API
// is reached at: another process answering there (a stand-in on a port
// the client does not hold) is not this node's client, whatever it says.
func (h *ClientHost) servesAPI(address string) error {
	if h.PID == 0 {
		return fmt.Errorf("no process holds %s open: this node's Nomad client is not running: %w", filepath.Join(h.StateDir(), "state.db"), ErrNotClient)
	}
	u, err := url.Parse(address)
	if err != nil {
		return fmt.Errorf("address %q: %w", address, err)
	}
	socks := map[string]bool{}
	for _, fd := range evidence.FDs(h.PID) {
		if ino, ok := strings.CutPrefix(fd.Target, "socket:["); ok {
			socks[strings.TrimSuffix(ino, "]")] = true
		}
	}
	if u.Scheme == "unix" {
		if listensUnix(h.PID, u.Path, socks) {
			return nil
		}
		return fmt.Errorf("%s is not a socket of the Nomad client (pid %d, holder of %s's state): %w", address, h.PID, h.DataDir, ErrNotClient)
	}
	_, portText, err := net.SplitHostPort(u.Host)
	if err != nil {
		portText = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	port, _ := strconv.ParseUint(portText, 10, 16)
	for _, table := range []string{"tcp", "tcp6"} {
		if listensTCP(h.PID, table, uint16(port), socks) {
			return nil
		}
	}
	return fmt.Errorf("the Nomad client of %s (pid %d, holder of its state) does not listen on port %d: the agent at %s is another process: %w", h.DataDir, h.PID, port, address, ErrNotClient)
}

// listensTCP: one of the process's sockets (socks, by inode) listens on
// port, in the process's own network namespace.
func listensTCP(pid int, table string, port uint16, socks map[string]bool) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + table)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		p, err := strconv.ParseUint(f[1][i+1:], 16, 16)
		if err == nil && uint16(p) == port && socks[f[9]] {
			return true
		}
	}
	return false
}

func listensUnix(pid int, path string, socks map[string]bool) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/unix")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 8 && f[7] == path && socks[f[6]] {
			return true
		}
	}
	return false
}
