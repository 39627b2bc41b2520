package inherited

import (
	"os"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

// Close closes what lacks close-on-exec (berth's inheritance)
// and leaves close-on-exec descriptors (the Go runtime's) alone.
func TestSecClose(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inherited, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD, 200)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(inherited)
	runtimeFD, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 200)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(runtimeFD)
	if err := Close(200); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(inherited), unix.F_GETFD, 0); err == nil {
		t.Errorf("descriptor %d without close-on-exec is still open", inherited)
	}
	if _, err := unix.FcntlInt(uintptr(runtimeFD), unix.F_GETFD, 0); err != nil {
		t.Errorf("close-on-exec descriptor %d was closed: %v", runtimeFD, err)
	}
	if err := CloseOnExec(runtimeFD); err != nil {
		t.Fatal(err)
	}
}
