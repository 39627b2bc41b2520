package podman

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLogSplitter(t *testing.T) {
	const ts = "2026-11-29T16:48:47.131905050+00:00"
	tests := []struct {
		name       string
		chunks     []string
		out, errs  string
		wantPendng bool
	}{
		{
			name:   "full lines",
			chunks: []string{ts + " stdout F out\n" + ts + " stderr F err\n"},
			out:    "out\n", errs: "err\n",
		},
		{
			name:   "partial line joins the next record",
			chunks: []string{ts + " stdout P part\n" + ts + " stdout F ial\n"},
			out:    "partial\n",
		},
		{
			name:   "record split across reads",
			chunks: []string{ts + " stdo", "ut F hello wor", "ld\n" + ts + " stderr F x\n"},
			out:    "hello world\n", errs: "x\n",
		},
		{
			name:   "empty line and spaces kept",
			chunks: []string{ts + " stdout F \n" + ts + " stdout F  a  b \n"},
			out:    "\n a  b \n",
		},
		{
			name:       "torn record waits for its end",
			chunks:     []string{ts + " stdout F unfinished"},
			wantPendng: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			s := logSplitter{stdout: &out, stderr: &errs}
			for _, c := range tt.chunks {
				if err := s.write([]byte(c)); err != nil {
					t.Fatal(err)
				}
			}
			if out.String() != tt.out || errs.String() != tt.errs {
				t.Fatalf("stdout %q stderr %q, want %q %q", out.String(), errs.String(), tt.out, tt.errs)
			}
			if (len(s.pending) > 0) != tt.wantPendng {
				t.Fatalf("pending = %q", s.pending)
			}
		})
	}
}

// TestLogCopierFollows checks that output written while the task runs
// reaches the files without waiting for the exit, and the rest at stop.
func TestLogCopierFollows(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "raw.log")
	c, err := newLogCopier(src, "", logTarget{Dir: dir, Task: "t"}, 0, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c.start()
	t.Cleanup(func() { _ = c.stop() })

	f, err := os.OpenFile(src, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("2026-01-01T00:00:00Z stdout F first\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "t.stdout.0"))
		if string(b) == "first\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stdout is %q, copier did not follow", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := f.WriteString("2026-01-01T00:00:00Z stderr F last\n2026-01-01T00:00:00Z stdout P no newline"); err != nil {
		t.Fatal(err)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"t.stdout.0": "first\nno newline", "t.stderr.0": "last\n"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q (%v), want %q", name, b, err, want)
		}
	}
}
