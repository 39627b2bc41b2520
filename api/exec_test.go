package api

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// execAgent answers every exec request with an upgrade and the exit frame
// of code, then reads what the client sends until it hangs up: a command
// that exits without reading its stdin.
func execAgent(t *testing.T, exit string) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + ExecUpgrade + "\r\n\r\n")
		if err := NewFrameWriter(brw, brw.Flush).Write(FrameExit, []byte(exit)); err != nil {
			t.Errorf("write the exit frame: %v", err)
			return
		}
		_, _ = io.Copy(io.Discard, conn) // until the client closes
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

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

// Exec returns only when its stdin pump has ended, also when the command
// exited while the pump was blocked reading a terminal or pipe nobody
// writes to; the reader is left usable (no deadline).
func TestExecJoinsStdinPump(t *testing.T) {
	cases := []struct {
		name     string
		stdin    bool
		resize   bool
		exit     string
		wantCode int
		wantErr  bool
	}{
		{name: "no stdin", exit: `{"exit_code":0}`},
		{name: "idle pipe", stdin: true, exit: `{"exit_code":3}`, wantCode: 3},
		{name: "idle pipe and resize", stdin: true, resize: true, exit: `{"exit_code":0}`},
		{name: "exec error", stdin: true, exit: `{"exit_code":127,"error":"no such command"}`, wantCode: 127, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := execAgent(t, tc.exit)
			o := ExecOptions{Cmd: []string{"true"}}
			var w *os.File
			if tc.stdin {
				r, pw, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close(); pw.Close() })
				o.Stdin, w = r, pw
			}
			if tc.resize {
				o.Resize = make(chan [2]uint16) // never sends
			}
			code, err := c.Exec(context.Background(), "a1", o)
			if code != tc.wantCode || (err != nil) != tc.wantErr {
				t.Fatalf("Exec = %d, %v; want %d, error %v", code, err, tc.wantCode, tc.wantErr)
			}
			for _, fn := range []string{"api.pumpStdin", "api.pumpResize"} {
				if n := goroutinesLeftIn(fn); n != 0 {
					t.Errorf("%d goroutines in %s after Exec returned", n, fn)
				}
			}
			if w == nil {
				return
			}
			if _, err := w.WriteString("after\n"); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(o.Stdin).ReadString('\n')
			if err != nil || line != "after\n" {
				t.Errorf("stdin after Exec: %q, %v; want the line written (no deadline left)", line, err)
			}
		})
	}
}
