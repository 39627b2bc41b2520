package netns

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/internal/testenv"
)

func TestValidateName(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
		want string
	}{
		{"alloc-1234", true, ""},
		{"66f88f81-ea9c-15ea-c113-068bf09aca81", true, ""},
		{"a.b_c", true, ""},
		{"", false, "empty"},
		{".", false, "not a file name"},
		{"..", false, "not a file name"},
		{"a/b", false, `'/'`},
		{"../etc", false, `'/'`},
		{"a b", false, `' '`},
		{"a\x00b", false, `'\x00'`},
		{strings.Repeat("x", MaxNameLen), true, ""},
		{strings.Repeat("x", MaxNameLen+1), false, "at most 128"},
	}
	for _, tc := range cases {
		err := ValidateName(tc.name)
		if tc.ok != (err == nil) {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
			continue
		}
		if err != nil && (!errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName mentioning %q", tc.name, err, tc.want)
		}
	}
}

// The namespaces the tests create are gone when they end.
func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

func TestCreateRemove(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := testenv.Context(t, time.Minute)
	m := NewManager(filepath.Join(t.TempDir(), "netns"))
	t.Cleanup(func() {
		// The test dir was made a mount point; undo it so TempDir can go.
		_ = unix.Unmount(m.Dir(), unix.MNT_DETACH)
	})
	name := "btns-" + filepath.Base(t.TempDir())
	path, err := m.Create(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = RemovePath(context.Background(), path) })
	if !m.Exists(name) {
		t.Fatal("created netns is not pinned")
	}
	if _, err := m.Create(ctx, name); !errors.Is(err, ErrExists) {
		t.Errorf("second create: %v, want ErrExists", err)
	}
	// `ip netns exec` style use works on our pin.
	out, err := exec.Command("nsenter", "--net="+path, "cat", "/proc/net/dev").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "lo:") || strings.Contains(string(out), "eth0") {
		t.Errorf("inside the netns: %v\n%s", err, out)
	}
	if _, _, err := mountState(m.Dir()); err != nil {
		t.Error(err)
	}
	if mounted, shared, _ := mountState(m.Dir()); !mounted || !shared {
		t.Errorf("netns dir mounted=%v shared=%v, want both", mounted, shared)
	}
	// No fd of ours on the pin.
	if hs, _ := Holders(ctx, path); len(hs) != 0 {
		t.Errorf("holders of a fresh netns: %v", hs)
	}
	list, err := m.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != name || !list[0].Pinned {
		t.Errorf("List = %+v, %v", list, err)
	}
	for i := 0; i < 2; i++ {
		rep, err := RemovePath(ctx, path)
		if err != nil {
			t.Fatalf("remove #%d: %v", i+1, err)
		}
		if rep.Existed != (i == 0) || rep.Busy {
			t.Errorf("remove #%d report %+v", i+1, rep)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin still exists: %v", err)
	}
}

func TestRemoveBusyReportsHolder(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := testenv.Context(t, time.Minute)
	m := NewManager(filepath.Join(t.TempDir(), "netns"))
	t.Cleanup(func() { _ = unix.Unmount(m.Dir(), unix.MNT_DETACH) })
	name := "btns-busy"
	path, err := m.Create(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = RemovePath(context.Background(), path) })
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := RemovePath(ctx, path)
	if err != nil {
		t.Fatalf("remove with an open fd: %v", err)
	}
	if !rep.Busy || len(rep.Holders) == 0 || rep.Holders[0].PID != os.Getpid() || rep.Holders[0].Kind != HolderFD {
		t.Errorf("report does not name this process as fd holder: %+v", rep)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pin still exists: %v", err)
	}
}

func TestCreateBadName(t *testing.T) {
	m := NewManager(t.TempDir())
	if _, err := m.Create(context.Background(), "../x"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("create ../x: %v", err)
	}
}
