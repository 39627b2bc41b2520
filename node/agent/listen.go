package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// maxSunPath is the longest unix socket path (sun_path without its NUL).
const maxSunPath = 107

// listenUnix listens on the API socket with mode 0600. A socket file
// nothing answers on is what a killed agent leaves, and is replaced; one
// that answers belongs to a running agent, and anything that is not a
// socket is never touched.
func listenUnix(path string, log *slog.Logger) (*unixSocket, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create API socket dir %s: %w", dir, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("API socket %s exists and is not a socket (%s); refusing to replace it", path, fi.Mode().Type())
		}
		conn, derr := net.DialTimeout("unix", path, time.Second)
		if derr == nil {
			conn.Close()
			return nil, fmt.Errorf("%w: something answers on %s (stop it, or set api.socket)", ErrAgentRunning, path)
		}
		if !errors.Is(derr, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("API socket %s exists and cannot be probed: %w", path, derr)
		}
		log.Info("removing the stale API socket of an agent that did not shut down", "socket", path)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale API socket %s: %w", path, err)
		}
	}

	// Bound under a temporary name, made 0600, then renamed into place:
	// the socket is never reachable with the umask's mode.
	tmp := filepath.Join(dir, ".berth-"+strconv.Itoa(os.Getpid())+".sock")
	if len(tmp) > maxSunPath {
		tmp = path
	}
	// A socket an earlier process of this PID left; should it stay, the
	// bind below says why.
	_ = os.Remove(tmp)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on API socket %s: %w", path, err)
	}
	// We remove the file ourselves: after the rename the listener's own
	// name is wrong, and a successor may own the path by then.
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		l.Close()
		return nil, errors.Join(fmt.Errorf("chmod API socket %s: %w", tmp, err), removeSocket(tmp))
	}
	if tmp != path {
		if err := os.Rename(tmp, path); err != nil {
			l.Close()
			return nil, errors.Join(fmt.Errorf("move API socket into place at %s: %w", path, err), removeSocket(tmp))
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		l.Close()
		return nil, fmt.Errorf("stat API socket %s: %w", path, err)
	}
	return &unixSocket{UnixListener: l, path: path, dev: st.Dev, ino: st.Ino}, nil
}

// unixSocket is the API's listener and the file it is bound to.
type unixSocket struct {
	*net.UnixListener
	path     string
	dev, ino uint64
}

// closeAndRemove closes the listener and removes its file if the path
// still is that file: a successor may already have bound its own there.
func (u *unixSocket) closeAndRemove() {
	u.Close()
	var st syscall.Stat_t
	if syscall.Stat(u.path, &st) == nil && st.Dev == u.dev && st.Ino == u.ino {
		// Nobody to tell at shutdown; a file left behind is a stale
		// socket the next agent removes before it binds.
		_ = os.Remove(u.path)
	}
}

// removeSocket removes a socket file of ours that failed half-way.
func removeSocket(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove API socket %s: %w", path, err)
	}
	return nil
}
