package jobspec

import (
	"strings"

	"golang.org/x/sys/unix"
)

// SignalNumber maps a kill_signal or change_signal name ("SIGINT", "INT",
// case-insensitive) to its number on Linux.
func SignalNumber(name string) (unix.Signal, bool) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	s := unix.SignalNum(n)
	return s, s != 0
}
