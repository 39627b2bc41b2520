package proc

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// Fields 4..21 are filler; field 22 (starttime) is 9999.
	tail := func(state string) string {
		return state + " 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 9999 1000 10"
	}
	tests := []struct {
		name    string
		in      string
		want    Stat
		wantErr bool
	}{
		{name: "plain", in: "123 (sleep) " + tail("S"),
			want: Stat{PID: 123, Comm: "sleep", State: 'S', PPID: 1, PGRP: 42, StartTime: 9999}},
		{name: "comm with spaces and parens", in: "7 (a) b (c) d) " + tail("R"),
			want: Stat{PID: 7, Comm: "a) b (c) d", State: 'R', PPID: 1, PGRP: 42, StartTime: 9999}},
		{name: "comm that looks like fields", in: "8 (1 2 3 4) 5) " + tail("Z"),
			want: Stat{PID: 8, Comm: "1 2 3 4) 5", State: 'Z', PPID: 1, PGRP: 42, StartTime: 9999}},
		{name: "empty comm", in: "9 () " + tail("S"),
			want: Stat{PID: 9, Comm: "", State: 'S', PPID: 1, PGRP: 42, StartTime: 9999}},
		{name: "truncated", in: "10 (x) S 1 2 3", wantErr: true},
		{name: "no comm", in: "11 x S 1 2 3", wantErr: true},
		{name: "bad pid", in: "abc (x) " + tail("S"), wantErr: true},
		{name: "bad starttime", in: "12 (x) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 nope 1000", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tc.in))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseStat(%q) = %+v, want error", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseStat(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ParseStat(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

// startNamed copies /bin/sleep to a file called name and runs it, so that the
// process's comm is name. The process is killed and reaped in t.Cleanup.
func startNamed(t *testing.T, name string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	src, err := os.Open("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "500", "500") // sleep sums its arguments
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// comm is set by execve; wait until the child is past it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := ReadStat(cmd.Process.Pid)
		if err == nil && st.Comm == truncComm(name) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("comm of pid %d never became %q (last %+v, %v)", cmd.Process.Pid, name, st, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cmd
}

func truncComm(s string) string {
	if len(s) > 15 {
		return s[:15]
	}
	return s
}

func TestLiveProcess(t *testing.T) {
	tests := []struct{ name string }{
		{name: "plain"},
		{name: "a) b (c"},
		{name: "x y) 1 2 3 4"},
		{name: ") ) )"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := startNamed(t, tc.name)
			pid := cmd.Process.Pid

			st, err := ReadStat(pid)
			if err != nil {
				t.Fatal(err)
			}
			if st.Comm != truncComm(tc.name) || st.PID != pid || st.PPID != os.Getpid() {
				t.Fatalf("ReadStat = %+v, want comm %q pid %d ppid %d", st, tc.name, pid, os.Getpid())
			}
			start, err := StartTime(pid)
			if err != nil {
				t.Fatal(err)
			}
			self, err := SelfStartTime()
			if err != nil {
				t.Fatal(err)
			}
			if start == 0 || start < self {
				t.Fatalf("child start time %d, self %d: child cannot start before us", start, self)
			}
			if !Alive(pid, start) {
				t.Fatalf("Alive(%d, %d) = false for a running process", pid, start)
			}
			if Alive(pid, start+1) {
				t.Fatalf("Alive(%d, %d) = true with a wrong start time", pid, start+1)
			}

			err = KillIfSame(pid, start+1, syscall.SIGKILL)
			if !errors.Is(err, ErrReused) {
				t.Fatalf("KillIfSame with wrong start time: %v, want ErrReused", err)
			}
			if !Alive(pid, start) {
				t.Fatal("KillIfSame with a wrong start time killed the process")
			}

			if err := KillIfSame(pid, start, syscall.SIGKILL); err != nil {
				t.Fatalf("KillIfSame: %v", err)
			}
			// Not reaped yet: a zombie is not alive, and not killable as "ours".
			waitFor(t, func() bool { s, err := ReadStat(pid); return err == nil && s.Zombie() })
			if Alive(pid, start) {
				t.Fatal("Alive = true for a zombie")
			}
			if err := KillIfSame(pid, start, syscall.SIGKILL); !errors.Is(err, ErrReused) {
				t.Fatalf("KillIfSame on a zombie: %v, want ErrReused", err)
			}
			_ = cmd.Wait()
			if _, err := StartTime(pid); !errors.Is(err, ErrNotFound) {
				t.Fatalf("StartTime after reap: %v, want ErrNotFound", err)
			}
			if err := KillIfSame(pid, start, syscall.SIGKILL); !errors.Is(err, ErrNotFound) {
				t.Fatalf("KillIfSame after reap: %v, want ErrNotFound", err)
			}
		})
	}
}

func TestMissing(t *testing.T) {
	tests := []struct {
		name string
		fn   func() error
	}{
		{"StartTime", func() error { _, err := StartTime(-1); return err }},
		{"KillIfSame", func() error { return KillIfSame(0, 1, syscall.SIGKILL) }},
		// PID numbers stop well below 1<<30 (pid_max limit is 4M).
		{"StartTimeHigh", func() error { _, err := StartTime(1 << 30); return err }},
		{"KillIfSameHigh", func() error { return KillIfSame(1<<30, 1, syscall.SIGKILL) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.fn(); !errors.Is(err, ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
		})
	}
	if Alive(1<<30, 1) {
		t.Fatal("Alive of a missing pid")
	}
}

func TestGroupMembers(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 1000 & sleep 1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	var members []Stat
	waitFor(t, func() bool {
		var err error
		members, err = GroupMembers(context.Background(), pgid)
		return err == nil && len(members) == 3
	})
	for _, m := range members {
		if m.PGRP != pgid {
			t.Fatalf("member %+v not in group %d", m, pgid)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := GroupMembers(ctx, pgid); !errors.Is(err, context.Canceled) {
		t.Fatalf("GroupMembers with canceled ctx: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
