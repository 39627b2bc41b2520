package allocdir

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth/berth/internal/testenv"
	"golang.org/x/sys/unix"
)

// isTmpfs reports whether dir is a tmpfs mount point.
func isTmpfs(t *testing.T, dir string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type == unix.TMPFS_MAGIC
}

// A task's secrets/ is a tmpfs of mode 0700 (mounted once, however often
// asked), listed under its allocation, and gone after Unmount and after
// the Remover took its directory: what a killed agent left mounted never
// outlives the allocation's directory.
func TestSecretsMount(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	tests := []struct {
		name string
		// end takes the mounts away (root, allocation dir).
		end func(t *testing.T, root, dir string)
	}{
		{"Unmount", func(t *testing.T, _, dir string) {
			if err := Unmount(ctx, dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "t", "secrets")); err != nil {
				t.Errorf("Unmount removed the mount point: %v", err)
			}
		}},
		{"Remover", func(t *testing.T, root, dir string) {
			r := NewRemover(root, nil)
			r.Remove(filepath.Base(dir))
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the allocation dir is still there: %v", err)
			}
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, id(i))
			secrets := filepath.Join(dir, "t", "secrets")
			if err := os.MkdirAll(secrets, 0o755); err != nil {
				t.Fatal(err)
			}
			// Another directory's mount is not the allocation's.
			other := filepath.Join(root, "not-an-id")
			if err := os.Mkdir(other, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = Unmount(ctx, root) })
			for range 2 {
				if err := MountSecrets(ctx, secrets); err != nil {
					t.Fatal(err)
				}
			}
			if err := MountSecrets(ctx, other); err != nil {
				t.Fatal(err)
			}
			if !isTmpfs(t, secrets) {
				t.Fatal("secrets/ is not a tmpfs")
			}
			if fi, err := os.Stat(secrets); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("secrets/ mode %v (%v), want 0700", fi.Mode(), err)
			}
			ms, err := Mounts(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 1 || len(ms[id(i)]) != 1 || ms[id(i)][0] != secrets {
				t.Fatalf("Mounts = %v, want %s once under %s", ms, secrets, id(i))
			}
			if err := os.WriteFile(filepath.Join(secrets, "token"), []byte("s3cret"), 0o600); err != nil {
				t.Fatal(err)
			}
			tc.end(t, root, dir)
			if ms, _ := Mounts(root); len(ms[id(i)]) != 0 {
				t.Errorf("still mounted: %v", ms)
			}
			if _, err := os.Stat(filepath.Join(secrets, "token")); !os.IsNotExist(err) {
				t.Errorf("the secret outlived its tmpfs: %v", err)
			}
			if !isTmpfs(t, other) {
				t.Error("a mount outside the allocation's directory was taken away")
			}
		})
	}
}

// A secrets/ a task replaced with a symlink (to a host directory) is
// refused: the tmpfs never lands on the link's target.
func TestSecretsMountRefusesLink(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	root := t.TempDir()
	target := filepath.Join(root, "host-dir")
	task := filepath.Join(root, id(0), "t")
	for _, d := range []string{target, task} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = Unmount(ctx, root) })
	secrets := filepath.Join(task, "secrets")
	if err := os.Symlink(target, secrets); err != nil {
		t.Fatal(err)
	}
	if err := MountSecrets(ctx, secrets); err == nil {
		t.Fatal("MountSecrets mounted through a symlink")
	}
	if isTmpfs(t, target) {
		t.Fatal("the symlink's target got the tmpfs")
	}
}
