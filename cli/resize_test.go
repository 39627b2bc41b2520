package cli

import (
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// goroutinesLeftIn counts the goroutines whose stack has fn once those
// that have finished their work are gone: a goroutine joined by closing a
// channel in a defer is still on its stack for a moment after the close.
func goroutinesLeftIn(fn string) int {
	n := -1
	for i := 0; i < 100 && n != 0; i++ {
		if i > 0 {
			time.Sleep(time.Millisecond)
		}
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		n = 0
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, fn) {
				n++
			}
		}
	}
	return n
}

// A SIGWINCH sends the terminal's size; stopping returns only once the
// goroutine has ended (it ranged over a channel signal.Stop never closes).
func TestForwardResizeEnds(t *testing.T) {
	resize := make(chan [2]uint16, 1)
	stop := forwardResize(func() (uint16, uint16, error) { return 24, 80, nil }, resize)
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		stop()
		t.Fatal(err)
	}
	if got := <-resize; got != [2]uint16{24, 80} {
		t.Errorf("resize sent %v, want [24 80]", got)
	}
	stop()
	if n := goroutinesLeftIn("cli.forwardResize"); n != 0 {
		t.Errorf("%d goroutines in forwardResize after stop", n)
	}
}

// Stdin that is a pipe is opened again, pollable (its Read can be given a
// deadline); a regular file is passed as it is.
func TestInterruptibleStdin(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, closeF := interruptibleStdin(r)
	defer closeF()
	if f == r {
		t.Fatal("a pipe was not opened again")
	}
	if err := f.SetReadDeadline(time.Now()); err != nil {
		t.Errorf("the pipe opened again takes no deadline: %v", err)
	}

	reg, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if g, closeG := interruptibleStdin(reg); g != reg {
		closeG()
		t.Error("a regular file was opened again (its offset would be lost)")
	}
}
