package acl

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/berth/berth/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.LeakCheckMain(m)) }

func canStat(t *testing.T, uid int, path string) bool {
	t.Helper()
	cmd := exec.Command("/usr/bin/stat", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	return cmd.Run() == nil
}

func TestSecGrantSearch(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs commands as other users")
	}
	// Not t.TempDir: its parent is 0700.
	top, err := os.MkdirTemp("", "btsec-acl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(top, "d")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := GrantSearch(dir, 12345); err != nil {
			t.Fatal(err)
		}
	}
	if err := GrantSearch(dir, 12347); err != nil {
		t.Fatal(err)
	}
	if !canStat(t, 12345, filepath.Join(dir, "f")) || !canStat(t, 12347, filepath.Join(dir, "f")) {
		t.Fatal("a granted uid cannot reach a file in the directory")
	}
	if canStat(t, 12346, filepath.Join(dir, "f")) {
		t.Fatal("a uid not granted reaches a file in the directory")
	}
	if ok, err := Searchable(dir, 12345); err != nil || !ok {
		t.Fatalf("Searchable = %v, %v", ok, err)
	}
	// The owning group keeps what it had (r-x), nothing more.
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o750 {
		t.Fatalf("mode %v, want 0750", got)
	}
	if _, err := decode([]byte{1, 2, 3}); err == nil {
		t.Fatal("a short ACL decoded")
	}
}
