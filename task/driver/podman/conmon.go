package podman

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/berth/berth/internal/pidfd"
)

// conmon is watched through a pidfd (internal/pidfd): podman's DELETE
// returns before conmon (and the `podman container cleanup` it runs once
// the task exited) are gone, and conmon exits only after podman recorded
// the exit: waiting for it both replaces polling the wait API and lets
// Destroy return only once nothing of the task is left.

// openConmon finds the conmon of container id through the PID file conmon
// wrote. It returns nil when that conmon is already gone.
func openConmon(pidFile, id string) (*pidfd.Process, error) {
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading conmon PID file %s: %w", pidFile, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil, fmt.Errorf("conmon PID file %s: bad content %q", pidFile, b)
	}
	p, err := openConmonPID(pid, id)
	if err != nil {
		return nil, fmt.Errorf("conmon of container %s: %w", id, err)
	}
	return p, nil
}

// isConmonOf accepts a container ID or name: conmon gets both (-c, -n).
func isConmonOf(cmdline []byte, idOrName string) bool {
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	if len(args) == 0 || !strings.HasSuffix(string(args[0]), "conmon") {
		return false
	}
	for i := 1; i+1 < len(args); i++ {
		switch string(args[i]) {
		case "-c", "--cid", "-n", "--name":
			if string(args[i+1]) == idOrName {
				return true
			}
		}
	}
	return false
}

// openConmonPID watches conmon PID pid if it is the conmon of id (ID or
// name); nil when it is gone or the PID names another process.
func openConmonPID(pid int, id string) (*pidfd.Process, error) {
	return openMatching(pid, func(cmdline []byte) bool { return isConmonOf(cmdline, id) })
}

// openMatching watches pid if its command line is what matches expects.
// With the pidfd open, /proc/<pid> is this process for as long as it
// lives: a command line that does not match means the process died and the
// PID was reused (or it is a zombie, which holds nothing either).
func openMatching(pid int, matches func(cmdline []byte) bool) (*pidfd.Process, error) {
	return pidfd.Open(pid, func(pid int) bool {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return err == nil && matches(cmdline)
	})
}
