package store

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// editBolt changes a closed store's file directly, as an older or newer
// berth (or a bug) would have left it.
func editBolt(t *testing.T, path string, fn func(*bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewerSchema(t *testing.T) {
	ctx := context.Background()
	s, dir := openTest(t, Options{})
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	editBolt(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("99"))
	})
	// Twice: the refused Open must release the lock and write nothing.
	for range 2 {
		_, err := Open(ctx, dir, Options{})
		if !errors.Is(err, ErrNewerSchema) {
			t.Fatalf("err = %v, want ErrNewerSchema", err)
		}
		for _, want := range []string{path, "99", fmt.Sprint(SchemaVersion), "upgrade berth"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q does not mention %q", err, want)
			}
		}
		if fds := openFDsTo(t, dir); len(fds) > 0 {
			t.Errorf("refused Open left fds open: %v", fds)
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		if v := string(tx.Bucket(bucketMeta).Get(keySchemaVersion)); v != "99" {
			t.Errorf("schema version rewritten to %q", v)
		}
		return nil
	})
}

func TestSchemaEdgeCases(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*bolt.Tx) error
		wantErr error // nil: Open succeeds
	}{
		{"current version", func(*bolt.Tx) error { return nil }, nil},
		{"no buckets at all (crash right after file creation)", func(tx *bolt.Tx) error {
			for _, b := range append(dataBuckets(), bucketMeta) {
				if err := tx.DeleteBucket(b); err != nil {
					return err
				}
			}
			return nil
		}, nil},
		{"data bucket missing", func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketAttachments) }, ErrCorrupt},
		{"not a berth store", func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket(bucketMeta); err != nil {
				return err
			}
			_, err := tx.CreateBucket([]byte("someone-elses"))
			return err
		}, ErrCorrupt},
		{"garbage version", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("x"))
		}, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := openTest(t, Options{})
			path := s.Path()
			_ = s.Close()
			editBolt(t, path, tt.edit)
			s, err := Open(context.Background(), dir, Options{})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.PutJob(context.Background(), "j", json.RawMessage(`{}`)); err != nil {
				t.Errorf("store unusable after Open: %v", err)
			}
		})
	}
}

// TestCorruptFile damages the db file in the ways a disk, a crash of
// something other than bbolt, or an operator can, and checks that Open says
// ErrCorrupt (never panics or hangs), that MoveAside then works, and that
// berth can start again with an empty store.
func TestCorruptFile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) // fixed: failures must reproduce
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"random 100 bytes", writeFile(func(int64) []byte { return random(100) })},
		{"random 4 KiB", writeFile(func(int64) []byte { return random(4096) })},
		{"random 64 KiB", writeFile(func(int64) []byte { return random(64 << 10) })},
		{"truncated to 10 bytes", truncate(func(int64) int64 { return 10 })},
		{"truncated inside the second meta page", truncate(func(int64) int64 { return 4096 + 100 })},
		{"truncated to two pages", truncate(func(int64) int64 { return 2 * 4096 })},
		{"truncated to half", truncate(func(size int64) int64 { return size / 2 })},
		{"both meta pages zeroed", overwrite(0, func(int64) []byte { return make([]byte, 2*4096) })},
		{"data pages overwritten with random bytes", overwrite(2*4096, func(size int64) []byte { return random(int(size) - 2*4096) })},
		{"truncated below the high-water mark", truncateBelowHWM},
		{"root page of a bucket overwritten", damageRoot(bucketAttachments, 0, func() []byte { return random(4096) })},
		// Header kept, so bbolt trusts the page and follows the random
		// child page numbers: wild reads that must not kill the process.
		{"root page body scrambled", damageRoot(bucketAllocations, 16, func() []byte { return random(4096 - 16) })},
		// The first child of a branch page pointing 4 GiB into a small
		// file: a read of unmapped memory (a fault, not a bounds panic).
		{"branch page pointing outside the file", damageRoot(bucketAllocations, 16+8, func() []byte {
			return binary.LittleEndian.AppendUint64(nil, 1<<20)
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "berthtest-data")
			fillStore(t, dir)
			path := filepath.Join(dir, DBFile)
			tt.damage(t, path)

			_, err := Open(ctx, dir, Options{})
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: err = %v, want ErrCorrupt", err)
			}
			for _, want := range []string{path, "mv " + path + " " + path + ".corrupt", "berth gc"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q does not mention %q", err, want)
				}
			}
			t.Log(err)
			// Nothing of the failed Open may stay open: no fd, no flock.
			if fds := openFDsTo(t, dir); len(fds) > 0 {
				t.Errorf("failed Open left fds open: %v", fds)
			}

			moved, err := MoveAside(path)
			if err != nil {
				t.Fatalf("MoveAside: %v", err)
			}
			if moved != path+".corrupt" {
				t.Errorf("moved to %s, want %s.corrupt", moved, path)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there after MoveAside: %v", path, err)
			}
			s, err := Open(ctx, dir, Options{})
			if err != nil {
				t.Fatalf("Open after MoveAside: %v", err)
			}
			defer s.Close()
			if list, err := s.ListAttachments(ctx); err != nil || len(list) != 0 {
				t.Errorf("fresh store: %d attachments, %v", len(list), err)
			}
		})
	}
}

// openFDsTo lists this process's fds on files under dir.
func openFDsTo(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") {
			out = append(out, e.Name()+" -> "+target)
		}
	}
	return out
}

// fillStore makes a real store spanning many pages.
func fillStore(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 200 {
		a := &Attachment{ID: fmt.Sprintf("att-%03d", i), NetnsPath: "/run/netns/" + strings.Repeat("x", 200), Phase: PhaseReady}
		if err := s.PutAttachment(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := s.PutAllocation(ctx, &Allocation{ID: a.ID, JobID: "j", Status: AllocRunning}); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(data func(size int64) []byte) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		if err := os.WriteFile(path, data(0), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func truncate(to func(size int64) int64) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(path, to(fi.Size())); err != nil {
			t.Fatal(err)
		}
	}
}

func overwrite(off int64, data func(size int64) []byte) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt(data(fi.Size()), off); err != nil {
			t.Fatal(err)
		}
	}
}

// truncateBelowHWM cuts the file one page short of the pages bbolt uses
// (bbolt grows files ahead, so cutting the tail alone can be harmless).
func truncateBelowHWM(t *testing.T, path string) {
	var size int64
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	_ = db.Close()
	if err := os.Truncate(path, size-4096); err != nil {
		t.Fatal(err)
	}
}

// damageRoot overwrites a bucket's root page from byte off on.
func damageRoot(bucket []byte, off int64, data func() []byte) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		var root int64
		db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		_ = db.View(func(tx *bolt.Tx) error { root = int64(tx.Bucket(bucket).RootPage()); return nil })
		_ = db.Close()
		if root < 2 {
			t.Fatalf("bucket %s has no page of its own (root %d): store too small for this test", bucket, root)
		}
		overwrite(root*4096+off, func(int64) []byte { return data() })(t, path)
	}
}

func TestCorruptRecord(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	if err := s.update(context.Background(), func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketAllocations).Put([]byte("bad"), []byte(`{"id":`)); err != nil {
			return err
		}
		return tx.Bucket(bucketAttachments).Put([]byte("bad"), []byte("{not json"))
	}); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetAttachment(ctx, "bad")
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "bad") {
		t.Errorf("Get: %v, want ErrCorrupt naming the record", err)
	}
	// One damaged record neither fails a listing nor hides the others: it
	// is listed as an unreadable stub.
	if err := s.PutAttachment(ctx, &Attachment{ID: "good", Phase: PhaseReady}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAllocation(ctx, &Allocation{ID: "good", JobID: "j", Status: AllocRunning}); err != nil {
		t.Fatal(err)
	}
	atts, err := s.ListAttachments(ctx)
	if err != nil || len(atts) != 2 || atts[0].ID != "bad" || atts[0].Phase != PhaseUnreadable || atts[0].LastError == "" || atts[1].Phase != PhaseReady {
		t.Errorf("ListAttachments with a damaged record: %+v, %v", atts, err)
	}
	allocs, err := s.ListAllocations(ctx, AllocFilter{})
	if err != nil || len(allocs) != 2 {
		t.Fatalf("ListAllocations with a damaged record: %+v, %v", allocs, err)
	}
	for _, a := range allocs {
		if a.ID == "bad" && (a.Status != AllocUnreadable || !strings.Contains(a.StatusDesc, "unreadable")) {
			t.Errorf("damaged allocation listed as %+v", a)
		}
	}
	bad, err := s.Unreadable(ctx)
	if err != nil || len(bad) != 2 || bad[0].Kind != kindAllocation || bad[1].Kind != kindAttachment {
		t.Errorf("Unreadable = %+v, %v; want the allocation and the attachment", bad, err)
	}
	if err := s.DeleteRecord(ctx, "bogus", "bad"); err == nil {
		t.Error("DeleteRecord of an unknown kind succeeded")
	}
	if err := s.UpdateAllocation(ctx, "bad", func(*Allocation) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("UpdateAllocation: %v, want ErrCorrupt", err)
	}
	// A caller can still get rid of them.
	if err := s.DeleteAttachment(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAllocation(ctx, &Allocation{ID: "bad", JobID: "j", Status: AllocComplete}); err != nil {
		t.Fatalf("PutAllocation over an undecodable record: %v", err)
	}
	if err := s.DeleteAllocation(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRecord(ctx, kindAttachment, "bad"); err != nil {
		t.Fatal(err)
	}
	if bad, err := s.Unreadable(ctx); err != nil || len(bad) != 0 {
		t.Errorf("Unreadable after the damaged records were removed: %+v, %v", bad, err)
	}
}

func TestMoveAside(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "berthtest-data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, DBFile)
	for i, want := range []string{".corrupt", ".corrupt.1", ".corrupt.2"} {
		if err := os.WriteFile(path, []byte(fmt.Sprint("copy ", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := MoveAside(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != path+want {
			t.Errorf("MoveAside #%d = %s, want %s", i, got, path+want)
		}
		// Older copies are never overwritten.
		if b, _ := os.ReadFile(got); string(b) != fmt.Sprint("copy ", i) {
			t.Errorf("%s holds %q", got, b)
		}
	}
	if _, err := MoveAside(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("MoveAside of a missing file: %v", err)
	}

	// Never from under a running berth.
	s, err := Open(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := MoveAside(path); !errors.Is(err, ErrLocked) {
		t.Errorf("MoveAside of an open store: %v, want ErrLocked", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("open store's file gone: %v", err)
	}
}
