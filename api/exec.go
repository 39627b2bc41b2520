package api

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// berth alloc exec talks to the agent over one HTTP/1.1 connection taken
// over after "101 Switching Protocols" (Upgrade: berth-exec), as Nomad's
// exec does over a websocket: each way a sequence of frames, a type byte,
// a big-endian uint32 length and that many bytes.
const (
	// ExecUpgrade is the Upgrade header's protocol name.
	ExecUpgrade = "berth-exec"

	// Client to agent.
	FrameStdin    byte = 'i' // bytes for the command's stdin
	FrameStdinEOF byte = 'I' // stdin is closed
	FrameResize   byte = 'r' // the terminal's size: rows, cols as two big-endian uint16

	// Agent to client.
	FrameStdout byte = 'o'
	FrameStderr byte = 'e'
	FrameExit   byte = 'x' // JSON ExecResult; the last frame

	// MaxFrameBytes bounds a frame's payload.
	MaxFrameBytes = 64 << 10
)

// ExecResult ends an exec session: the command's exit code, or why it
// could not run (Error set, ExitCode then 126 as a shell says "cannot
// execute", or 127 for a command not found).
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
}

// FrameWriter writes frames; safe for concurrent use.
type FrameWriter struct {
	mu sync.Mutex
	w  io.Writer
	// flush, when set, is called after each frame.
	flush func() error
}

// NewFrameWriter writes frames to w, calling flush (if not nil) after each.
func NewFrameWriter(w io.Writer, flush func() error) *FrameWriter {
	return &FrameWriter{w: w, flush: flush}
}

// Write sends one frame of type typ (split when p is larger than
// MaxFrameBytes).
func (fw *FrameWriter) Write(typ byte, p []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for first := true; first || len(p) > 0; first = false {
		n := min(len(p), MaxFrameBytes)
		var hdr [5]byte
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		if _, err := fw.w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := fw.w.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
		if fw.flush != nil {
			if err := fw.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stream is an io.Writer of frames of one type.
func (fw *FrameWriter) Stream(typ byte) io.Writer { return frameStream{fw, typ} }

type frameStream struct {
	fw  *FrameWriter
	typ byte
}

func (s frameStream) Write(p []byte) (int, error) {
	if err := s.fw.Write(s.typ, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ReadFrame reads one frame; a payload over MaxFrameBytes is an error.
func ReadFrame(r *bufio.Reader) (typ byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxFrameBytes {
		return 0, nil, fmt.Errorf("frame of %d bytes: more than %d", n, MaxFrameBytes)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	return hdr[0], payload, nil
}

// ResizePayload encodes a terminal size.
func ResizePayload(rows, cols uint16) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint16(b, rows)
	binary.BigEndian.PutUint16(b[2:], cols)
	return b
}

// ParseResize decodes a terminal size.
func ParseResize(p []byte) (rows, cols uint16, ok bool) {
	if len(p) != 4 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:]), true
}

// ExecOptions are one `berth alloc exec`.
type ExecOptions struct {
	// Task is the task to run beside; "" is the group's only task.
	Task string
	Cmd  []string
	// TTY asks for a terminal: the command's stdin, stdout and stderr are
	// one pty (stderr is then part of stdout).
	TTY bool
	// Stdin is sent to the command (nil: it reads EOF at once).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Resize carries the local terminal's size changes (TTY only); the
	// first size is best sent before the command starts (Rows, Cols).
	Resize     <-chan [2]uint16
	Rows, Cols uint16
}

// Exec runs a command in an allocation's task context (its network
// namespace, user, cgroup and filesystem) and returns its exit code.
//
// Exec reads o.Stdin only until it returns: a Read still blocked when the
// session ends is interrupted through SetReadDeadline when o.Stdin has it
// (an *os.File of a pipe or a terminal opened pollable, a net.Conn; its
// deadline is cleared again), else Exec waits for that Read to return.
func (c *Client) Exec(ctx context.Context, allocID string, o ExecOptions) (int, error) {
	conn, err := c.execUpgrade(ctx, allocID, o)
	if err != nil {
		return -1, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	fw := NewFrameWriter(conn, nil)
	stopStdin := pumpStdin(fw, o.Stdin)
	resizeDone, resizeEnded := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(resizeEnded)
		pumpResize(fw, o.Resize, resizeDone)
	}()
	defer func() {
		// The connection first: the pumps' writes fail from then on, so
		// neither sends again nor reads another chunk of stdin.
		conn.Close()
		close(resizeDone)
		stopStdin()
		<-resizeEnded
	}()
	code, err := readExecFrames(bufio.NewReader(conn), o)
	if err != nil && ctx.Err() != nil {
		return -1, ctx.Err()
	}
	if err != nil && !IsExecError(err) {
		return -1, fmt.Errorf("agent at %s: exec in %s: %w", c.addr, allocID, err)
	}
	return code, err
}

// execRequest is the GET that asks the agent to upgrade to an exec session.
func (c *Client) execRequest(ctx context.Context, allocID string, o ExecOptions) (*http.Request, error) {
	q := url.Values{}
	cmd, _ := json.Marshal(o.Cmd)
	q.Set("command", string(cmd))
	if o.Task != "" {
		q.Set("task", o.Task)
	}
	if o.TTY {
		q.Set("tty", "true")
		if o.Rows > 0 && o.Cols > 0 {
			q.Set("rows", fmt.Sprint(o.Rows))
			q.Set("cols", fmt.Sprint(o.Cols))
		}
	}
	path := "/v1/allocation/" + url.PathEscape(allocID) + "/exec?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", ExecUpgrade)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// execUpgrade sends the exec request and returns the connection the agent
// switched to the exec protocol.
func (c *Client) execUpgrade(ctx context.Context, allocID string, o ExecOptions) (io.ReadWriteCloser, error) {
	req, err := c.execRequest(ctx, allocID, o)
	if err != nil {
		return nil, err
	}
	hc := c.hc
	if tr, ok := c.hc.Transport.(*http.Transport); ok {
		// An upgrade is HTTP/1.1's.
		tr = tr.Clone()
		tr.ForceAttemptHTTP2 = false
		if tr.TLSClientConfig != nil {
			tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		hc = &http.Client{Transport: tr}
		// The upgraded connection is no longer the transport's: closing
		// its idle ones leaves the session open.
		defer tr.CloseIdleConnections()
	}
	resp, err := hc.Do(req)
	if err != nil {
		if isNoAgent(err) {
			return nil, fmt.Errorf("%w at %s: %v", ErrNoAgent, c.addr, err)
		}
		return nil, fmt.Errorf("agent at %s: exec in %s: %w", c.addr, allocID, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if err := checkStatus(resp); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("agent at %s: exec in %s: answered %s, not 101 Switching Protocols", c.addr, allocID, resp.Status)
	}
	conn, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, fmt.Errorf("agent at %s: exec in %s: the upgraded connection is not writable", c.addr, allocID)
	}
	return conn, nil
}

// readDeadliner is a reader whose blocked Read can be interrupted.
type readDeadliner interface {
	SetReadDeadline(time.Time) error
}

// pumpStdin sends in's bytes as stdin frames, then a stdin-EOF frame (at
// once when in is nil). The function it returns ends the pump and waits
// for it: a Read blocked in in is interrupted when in can be (see Exec).
func pumpStdin(fw *FrameWriter, in io.Reader) (stop func()) {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if in != nil {
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if n > 0 && fw.Write(FrameStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					break
				}
			}
		}
		// The agent may have gone: nothing to tell it then.
		_ = fw.Write(FrameStdinEOF, nil)
	}()
	return func() {
		d, ok := in.(readDeadliner)
		if ok && d.SetReadDeadline(time.Now()) == nil {
			// Left usable for the caller; it took a deadline a moment ago.
			defer d.SetReadDeadline(time.Time{})
		}
		<-ended
	}
}

// pumpResize sends the terminal's size changes until resize is closed (a
// nil resize never sends), a write fails or done is closed.
func pumpResize(fw *FrameWriter, resize <-chan [2]uint16, done <-chan struct{}) {
	for {
		select {
		case sz, ok := <-resize:
			if !ok || fw.Write(FrameResize, ResizePayload(sz[0], sz[1])) != nil {
				return
			}
		case <-done:
			return
		}
	}
}

// readExecFrames copies the command's output to o.Stdout and o.Stderr
// until its exit frame, and returns its exit code.
func readExecFrames(br *bufio.Reader, o ExecOptions) (int, error) {
	for {
		typ, p, err := ReadFrame(br)
		if err != nil {
			return -1, fmt.Errorf("the connection ended before the command's exit status: %w", err)
		}
		switch typ {
		case FrameStdout:
			if o.Stdout != nil {
				_, _ = o.Stdout.Write(p)
			}
		case FrameStderr:
			if o.Stderr != nil {
				_, _ = o.Stderr.Write(p)
			}
		case FrameExit:
			var r ExecResult
			if err := json.Unmarshal(p, &r); err != nil {
				return -1, fmt.Errorf("bad exit frame: %w", err)
			}
			if r.Error != "" {
				return r.ExitCode, &ExecError{Result: r}
			}
			return r.ExitCode, nil
		}
	}
}

// ExecError is a command that could not run in the task's context; its
// Result has the exit code a shell would give.
type ExecError struct{ Result ExecResult }

func (e *ExecError) Error() string { return e.Result.Error }

// IsExecError reports whether err is an *ExecError.
func IsExecError(err error) bool {
	var e *ExecError
	return errors.As(err, &e)
}

// HeaderHasToken reports whether a comma-separated header value has tok
// (case-insensitive), as Connection: keep-alive, Upgrade does.
func HeaderHasToken(v, tok string) bool {
	for _, p := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(p), tok) {
			return true
		}
	}
	return false
}
