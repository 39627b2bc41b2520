package store

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The lock tests re-exec this test binary as a second berth; these
// variables switch it into that role before any test runs.
const (
	envChildRole = "BERTH_STORE_TEST_CHILD"
	envChildDir  = "BERTH_STORE_TEST_DIR"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envChildRole); role != "" {
		os.Exit(child(role, os.Getenv(envChildDir)))
	}
	os.Exit(m.Run())
}

// child is a second berth process on the data dir: "write-many" writes
// 50 attachments, "write-forever" writes until killed, "own" takes the
// owner lock; each says "ready" first and holds on until stdin closes.
func child(role, dir string) int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	s, err := Open(ctx, dir, Options{})
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	switch role {
	case "own":
		if _, err := LockOwner(dir, "berth agent"); err != nil {
			return fail(err)
		}
		fmt.Println("ready")
	case "write-forever":
		for i := 0; ; i++ {
			if err := s.PutAttachment(ctx, &Attachment{ID: fmt.Sprintf("from-child-%d", i), Phase: PhaseIntent}); err != nil {
				return fail(err)
			}
			if i == 0 {
				fmt.Println("ready")
			}
		}
	case "write-many":
		fmt.Println("ready")
		for j := range 50 {
			if err := s.PutAttachment(ctx, &Attachment{ID: fmt.Sprintf("c-%d", j), Phase: PhaseReady}); err != nil {
				return fail(err)
			}
		}
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	fmt.Println("done")
	return 0
}

func openTest(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "berthtest-data")
	s, err := Open(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, dir
}

func jsonEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func TestOpenCreatesDataDir(t *testing.T) {
	s, dir := openTest(t, Options{})
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("data dir mode = %o, want 700", perm)
	}
	if want := filepath.Join(dir, DBFile); s.Path() != want {
		t.Errorf("Path() = %s, want %s", s.Path(), want)
	}
}

func TestAttachmentRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, dir := openTest(t, Options{})
	created := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name string
		in   Attachment
	}{
		{"minimal", Attachment{ID: "a-min", Phase: PhaseIntent}},
		{"full", Attachment{
			ID:               "a-full",
			NetnsPath:        "/run/netns/berth-a-full",
			Network:          "bridge",
			IfName:           "eth0",
			ConfList:         json.RawMessage(`{"cniVersion":"1.0.0","name":"bridge","plugins":[{"type":"bridge"}]}`),
			Result:           json.RawMessage(`{"ips":[{"address":"10.199.3.2/24"}]}`),
			Args:             map[string]string{"IgnoreUnknown": "1"},
			CapabilityArgs:   map[string]any{"portMappings": []any{map[string]any{"hostPort": 8080.0, "protocol": "tcp"}}},
			Phase:            PhaseTearingDown,
			OwnerPID:         4242,
			OwnerStartTime:   987654321,
			AllocID:          "alloc-1",
			CreatedAt:        created,
			TeardownAttempts: 3,
			LastError:        "umount: device or resource busy",
			NextAttempt:      created.Add(time.Minute),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			before := time.Now()
			if err := s.PutAttachment(ctx, &in); err != nil {
				t.Fatal(err)
			}
			if in.UpdatedAt.Before(before) {
				t.Errorf("UpdatedAt %v not set by Put", in.UpdatedAt)
			}
			if tt.in.CreatedAt.IsZero() && !in.CreatedAt.Equal(in.UpdatedAt) {
				t.Errorf("CreatedAt %v, want UpdatedAt %v for a new record", in.CreatedAt, in.UpdatedAt)
			}
			if !tt.in.CreatedAt.IsZero() && !in.CreatedAt.Equal(tt.in.CreatedAt) {
				t.Errorf("CreatedAt changed to %v", in.CreatedAt)
			}
			got, err := s.GetAttachment(ctx, in.ID)
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, "attachment", got, &in)
		})
	}

	// And after a reopen: the data is on disk, not in a cache.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	list, err := s2.ListAttachments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "a-full" || list[1].ID != "a-min" {
		t.Fatalf("ListAttachments after reopen = %v, want a-full, a-min", ids(list))
	}
	if list[0].Phase != PhaseTearingDown || list[0].TeardownAttempts != 3 {
		t.Errorf("reopened a-full = %+v", list[0])
	}
}

func ids[T interface{ *Attachment | *Allocation }](list []T) []string {
	var out []string
	for _, v := range list {
		switch r := any(v).(type) {
		case *Attachment:
			out = append(out, r.ID)
		case *Allocation:
			out = append(out, r.ID)
		}
	}
	return out
}

func TestAttachmentNotFoundAndDelete(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	_, err := s.GetAttachment(ctx, "nope")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Get missing: err = %v, want ErrNotFound naming the id", err)
	}
	if err := s.DeleteAttachment(ctx, "nope"); err != nil {
		t.Errorf("Delete missing: %v, want nil", err)
	}
	if err := s.PutAttachment(ctx, &Attachment{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAttachment(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAttachment(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after delete: %v", err)
	}
	err = s.UpdateAttachment(ctx, "nope", func(*Attachment) error { return nil })
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Update missing: %v, want ErrNotFound", err)
	}
}

func TestPutRejectsBadRecords(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	tests := []struct {
		name string
		put  func() error
	}{
		{"nil attachment", func() error { return s.PutAttachment(ctx, nil) }},
		{"attachment without id", func() error { return s.PutAttachment(ctx, &Attachment{}) }},
		{"nil allocation", func() error { return s.PutAllocation(ctx, nil) }},
		{"allocation without id", func() error { return s.PutAllocation(ctx, &Allocation{JobID: "j"}) }},
		{"job without id", func() error { return s.PutJob(ctx, "", json.RawMessage(`{}`)) }},
		{"job not json", func() error { return s.PutJob(ctx, "j", json.RawMessage(`{not json`)) }},
		{"job empty spec", func() error { return s.PutJob(ctx, "j", nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.put(); err == nil {
				t.Error("want an error")
			}
		})
	}
}

func TestUpdateFnErrorAborts(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	if err := s.PutAttachment(ctx, &Attachment{ID: "att", Phase: PhaseReady}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAllocation(ctx, &Allocation{ID: "alloc", JobID: "j", Status: AllocRunning}); err != nil {
		t.Fatal(err)
	}
	errBoom := errors.New("boom")
	tests := []struct {
		name   string
		update func() error
		want   error
	}{
		{"attachment fn error", func() error {
			return s.UpdateAttachment(ctx, "att", func(a *Attachment) error {
				a.Phase = PhaseTearingDown
				return errBoom
			})
		}, errBoom},
		{"attachment id change", func() error {
			return s.UpdateAttachment(ctx, "att", func(a *Attachment) error {
				a.Phase = PhaseTearingDown
				a.ID = "other"
				return nil
			})
		}, nil},
		{"allocation fn error", func() error {
			return s.UpdateAllocation(ctx, "alloc", func(a *Allocation) error {
				a.Status = AllocFailed
				return errBoom
			})
		}, errBoom},
		{"allocation id change", func() error {
			return s.UpdateAllocation(ctx, "alloc", func(a *Allocation) error {
				a.Status = AllocFailed
				a.ID = "other"
				return nil
			})
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.update()
			if err == nil {
				t.Fatal("want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			a, err := s.GetAttachment(ctx, "att")
			if err != nil || a.Phase != PhaseReady {
				t.Errorf("attachment after aborted update: %+v, %v", a, err)
			}
			al, err := s.GetAllocation(ctx, "alloc")
			if err != nil || al.Status != AllocRunning {
				t.Errorf("allocation after aborted update: %+v, %v", al, err)
			}
			if _, err := s.GetAttachment(ctx, "other"); !errors.Is(err, ErrNotFound) {
				t.Errorf("record under the changed id exists: %v", err)
			}
		})
	}
}

func TestUpdateWrites(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	a := &Attachment{ID: "att", Phase: PhaseReady}
	if err := s.PutAttachment(ctx, a); err != nil {
		t.Fatal(err)
	}
	err := s.UpdateAttachment(ctx, "att", func(a *Attachment) error {
		a.Phase = PhaseTearingDown
		a.TeardownAttempts++
		a.LastError = "EBUSY"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAttachment(ctx, "att")
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != PhaseTearingDown || got.TeardownAttempts != 1 || got.LastError != "EBUSY" {
		t.Errorf("after update: %+v", got)
	}
	if !got.CreatedAt.Equal(a.CreatedAt) || got.UpdatedAt.Before(a.UpdatedAt) {
		t.Errorf("timestamps: created %v (want %v), updated %v (was %v)", got.CreatedAt, a.CreatedAt, got.UpdatedAt, a.UpdatedAt)
	}
}

func TestAllocationRoundTripAndFilter(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	full := &Allocation{
		ID: "a1", Namespace: "default", JobID: "web", Group: "g", Status: AllocRunning,
		Tasks: []TaskState{{Name: "t", Driver: "podman", State: "running", Restarts: 1,
			StartedAt: time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC),
			Handle:    &TaskHandle{Driver: "podman", ContainerID: "abc", PID: 77, PIDStartTime: 5}}},
		Network: &NetworkStatus{Mode: "cni/bridge", Network: "bridge", NetnsPath: "/run/netns/x",
			Interface: "eth0", IPv4: []string{"10.199.3.2"}, DNS: &DNS{Servers: []string{"10.199.3.1"}}},
		Events:    []Event{{Time: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), Type: "Started", Message: "ok"}},
		TimingsMS: map[string]float64{"add": 89.5},
		Holders:   []string{"pid 1 (x)"},
	}
	if err := s.PutAllocation(ctx, full); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAllocation(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "allocation", got, full)
	if _, err := s.GetAllocation(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get missing allocation: %v", err)
	}

	more := []*Allocation{
		{ID: "a2", Namespace: "default", JobID: "web", Status: AllocComplete},
		{ID: "a3", Namespace: "default", JobID: "db", Status: AllocPending},
		{ID: "a4", Namespace: "other", JobID: "web", Status: AllocFailed},
	}
	for _, a := range more {
		if err := s.PutAllocation(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		filter AllocFilter
		want   []string // newest first
	}{
		{"all", AllocFilter{}, []string{"a4", "a3", "a2", "a1"}},
		{"job", AllocFilter{JobID: "web"}, []string{"a4", "a2", "a1"}},
		{"namespace and job", AllocFilter{Namespace: "default", JobID: "web"}, []string{"a2", "a1"}},
		{"status", AllocFilter{Status: AllocFailed}, []string{"a4"}},
		{"non-terminal", AllocFilter{NonTerminal: true}, []string{"a3", "a1"}},
		{"none", AllocFilter{JobID: "missing"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list, err := s.ListAllocations(ctx, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(list); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("ListAllocations(%+v) = %v, want %v", tt.filter, got, tt.want)
			}
		})
	}

	if err := s.DeleteAllocation(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAllocation(ctx, "a2"); err != nil {
		t.Errorf("delete missing allocation: %v", err)
	}
	if _, err := s.GetAllocation(ctx, "a2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get deleted allocation: %v", err)
	}
}

func TestJobs(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	for _, id := range []string{"web", "db"} {
		if err := s.PutJob(ctx, id, json.RawMessage(`{"id":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := s.GetJob(ctx, "web")
	if err != nil || string(spec) != `{"id":"web"}` {
		t.Errorf("GetJob(web) = %s, %v", spec, err)
	}
	list, err := s.ListJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "db" || list[1].ID != "web" || string(list[1].Spec) != `{"id":"web"}` {
		t.Errorf("ListJobs = %+v", list)
	}
	if err := s.DeleteJob(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteJob(ctx, "web"); err != nil {
		t.Errorf("delete missing job: %v", err)
	}
	if _, err := s.GetJob(ctx, "web"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "web") {
		t.Errorf("GetJob deleted: %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	s, dir := openTest(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"Open":            func() error { _, err := Open(ctx, dir+"-other", Options{}); return err },
		"PutAttachment":   func() error { return s.PutAttachment(ctx, &Attachment{ID: "x"}) },
		"GetAttachment":   func() error { _, err := s.GetAttachment(ctx, "x"); return err },
		"ListAllocations": func() error { _, err := s.ListAllocations(ctx, AllocFilter{}); return err },
		"PutJob":          func() error { return s.PutJob(ctx, "j", json.RawMessage(`{}`)) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with canceled ctx: %v, want context.Canceled", name, err)
		}
	}
}

func TestCloseTwiceAndUseAfterClose(t *testing.T) {
	s, _ := openTest(t, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := s.PutAttachment(context.Background(), &Attachment{ID: "x"}); err == nil {
		t.Error("Put after Close succeeded")
	}
}

// TestManyStoresOneDir: several Stores on one data dir, in this process
// and another, all read and write at once and see each other's records.
func TestManyStoresOneDir(t *testing.T) {
	ctx := context.Background()
	a, dir := openTest(t, Options{})
	b, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatalf("second Store on the same dir: %v", err)
	}
	defer b.Close()

	child, stdin, lines := startChild(t, dir, "write-many")
	if line, ok := <-lines; !ok || line != "ready" {
		t.Fatalf("child said %q", line)
	}
	var wg sync.WaitGroup
	for i, s := range []*Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				if err := s.PutAttachment(ctx, &Attachment{ID: fmt.Sprintf("s%d-%d", i, j), Phase: PhaseReady}); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.ListAttachments(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	_ = stdin.Close()
	if line := <-lines; line != "done" {
		t.Fatalf("child said %q", line)
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	for _, s := range []*Store{a, b} {
		list, err := s.ListAttachments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 150 {
			t.Errorf("a store sees %d attachments, want 150 (50 from each writer)", len(list))
		}
	}
}

// TestKilledWriter: a berth SIGKILLed while it writes leaves the store
// readable and writable by the others; what it committed is on disk.
func TestKilledWriter(t *testing.T) {
	ctx := context.Background()
	s, dir := openTest(t, Options{})
	child, _, lines := startChild(t, dir, "write-forever")
	if line := <-lines; line != "ready" {
		t.Fatalf("child said %q", line)
	}
	time.Sleep(50 * time.Millisecond)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if _, err := s.GetAttachment(ctx, "from-child-0"); err != nil {
		t.Errorf("record committed by the killed writer: %v", err)
	}
	if err := s.PutAttachment(ctx, &Attachment{ID: "after-kill"}); err != nil {
		t.Fatalf("write after the writer was killed: %v", err)
	}
	s2, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatalf("Open after a writer was killed: %v", err)
	}
	_ = s2.Close()
}

func TestLockedErrorWithoutPID(t *testing.T) {
	e := &LockedError{Dir: "/d", LockPath: "/d/agent.lock"}
	if !errors.Is(e, ErrLocked) || !strings.Contains(e.Error(), "pid unknown") {
		t.Errorf("error %q", e)
	}
}

func checkLocked(t *testing.T, err error, dir string, pid int) {
	t.Helper()
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("err = %v, want ErrLocked", err)
	}
	var le *LockedError
	if !errors.As(err, &le) {
		t.Fatalf("err %v is not a *LockedError", err)
	}
	if le.PID != pid {
		t.Errorf("LockedError.PID = %d, want %d", le.PID, pid)
	}
	msg := err.Error()
	for _, want := range []string{dir, fmt.Sprintf("pid %d", pid), "berth agent", "--data-dir"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
}

// TestOwnerLock: one owner (agent) per data dir, in this process or
// another; a killed owner frees it; stores open meanwhile are unaffected.
func TestOwnerLock(t *testing.T) {
	ctx := context.Background()
	s, dir := openTest(t, Options{})
	o, err := LockOwner(dir, "berth agent")
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockOwner(dir, "berth agent")
	checkLocked(t, err, dir, os.Getpid())
	o.Release()

	child, _, lines := startChild(t, dir, "own")
	if line := <-lines; line != "ready" {
		t.Fatalf("child said %q", line)
	}
	_, err = LockOwner(dir, "berth agent")
	checkLocked(t, err, dir, child.Process.Pid)
	if !strings.Contains(err.Error(), "store.test") {
		t.Errorf("message %q does not name the holder's command", err)
	}
	if err := s.PutAttachment(ctx, &Attachment{ID: "beside-owner"}); err != nil {
		t.Errorf("store write beside an owner: %v", err)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	o, err = LockOwner(dir, "berth agent")
	if err != nil {
		t.Fatalf("LockOwner after the owner was killed: %v", err)
	}
	o.Release()
}

func startChild(t *testing.T, dir, role string) (*exec.Cmd, io.WriteCloser, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildRole+"="+role, envChildDir+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Only the PID we started; Kill after exit is a harmless error.
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 4)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, stdin, lines
}
