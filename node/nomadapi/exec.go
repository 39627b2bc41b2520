package nomadapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	napi "github.com/hashicorp/nomad/api"
)

// Execer runs one command in an allocation's task.
type Execer interface {
	// Task is the task the command runs beside.
	Task() string
	// Exec runs cmd with the client's input from in (closed when the
	// client is gone: the command is then killed) and its output to out,
	// and returns its exit code; an error when it could not run at all
	// (its exit code is then a shell's: 126, or 127 for no such command).
	Exec(ctx context.Context, cmd []string, tty bool, in <-chan ExecInput, out func(stderr bool, p []byte) error) (int, error)
}

// ExecInput is one message of the client: stdin data, the end of stdin,
// or the terminal's new size.
type ExecInput struct {
	Data       []byte
	Close      bool
	Rows, Cols uint16
}

// maxExecCommand bounds the command's JSON.
const maxExecCommand = 64 << 10

var upgrader = websocket.Upgrader{
	ReadBufferSize: 4096, WriteBufferSize: 4096,
	// The CLI sends no Origin; a browser's page on another origin must
	// not drive exec with the operator's cookies (there are none: the
	// token is asked anyway), so only same-host origins are taken.
	CheckOrigin: func(r *http.Request) bool {
		o := r.Header.Get("Origin")
		return o == "" || o == "http://"+r.Host || o == "https://"+r.Host
	},
}

// handleExec serves Nomad's exec websocket: the command as a JSON array
// in ?command=, the task and tty; the client sends {"stdin":{"data"}},
// {"stdin":{"close":true}} and {"tty_size":{...}}, the server
// {"stdout":{"data"}}, {"stderr":{"data"}} and at last
// {"exited":true,"result":{"exit_code":N}}.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var cmd []string
	if c := q.Get("command"); len(c) > maxExecCommand {
		writeError(w, http.StatusBadRequest, fmt.Errorf("command is longer than %d bytes", maxExecCommand))
		return
	} else if err := json.Unmarshal([]byte(c), &cmd); err != nil || len(cmd) == 0 || cmd[0] == "" {
		writeError(w, http.StatusBadRequest, fmt.Errorf(`command %q: give the command and its arguments as a JSON array, e.g. ["/bin/sh"]`, c))
		return
	}
	tty := false
	if v := q.Get("tty"); v != "" {
		var err error
		if tty, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("tty %q: use true or false", v))
			return
		}
	}
	ex, err := s.b.AllocExec(r.Context(), r.PathValue("id"), q.Get("task"))
	if err != nil {
		writeErr(w, err)
		return
	}
	conn, err := upgrader.Upgrade(hijacker(w), r, nil)
	if err != nil {
		// Upgrade answered the client.
		return
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Time{})
	_ = conn.SetWriteDeadline(time.Time{})
	s.log.Info("exec in allocation (nomad API)", "alloc_id", r.PathValue("id"), "task", ex.Task(), "cmd", cmd, "tty", tty, "remote", r.RemoteAddr)

	var wmu sync.Mutex
	send := func(v napi.ExecStreamingOutput) error {
		wmu.Lock()
		defer wmu.Unlock()
		_ = conn.SetWriteDeadline(time.Now().Add(time.Minute))
		return conn.WriteJSON(v)
	}
	in := make(chan ExecInput, 16)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	go readExecInput(ctx, conn, in)
	code, err := ex.Exec(ctx, cmd, tty, in, func(stderr bool, p []byte) error {
		op := &napi.ExecStreamingIOOperation{Data: p}
		if stderr {
			return send(napi.ExecStreamingOutput{Stderr: op})
		}
		return send(napi.ExecStreamingOutput{Stdout: op})
	})
	if err != nil {
		// What the CLI prints of a command that could not start.
		_ = send(napi.ExecStreamingOutput{Stderr: &napi.ExecStreamingIOOperation{Data: []byte(err.Error() + "\n")}})
	}
	_ = send(napi.ExecStreamingOutput{Exited: true, Result: &napi.ExecStreamingExitResult{ExitCode: code}})
	wmu.Lock()
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	wmu.Unlock()
}

// readExecInput passes the client's messages on until its connection
// ends, then closes in.
func readExecInput(ctx context.Context, conn *websocket.Conn, in chan<- ExecInput) {
	defer close(in)
	for {
		var m napi.ExecStreamingInput
		if err := conn.ReadJSON(&m); err != nil {
			return
		}
		var x ExecInput
		switch {
		case m.Stdin != nil && (len(m.Stdin.Data) > 0 || m.Stdin.Close):
			x.Data, x.Close = m.Stdin.Data, m.Stdin.Close
		case m.TTYSize != nil && m.TTYSize.Height > 0 && m.TTYSize.Width > 0:
			x.Rows, x.Cols = uint16(min(m.TTYSize.Height, 65535)), uint16(min(m.TTYSize.Width, 65535))
		default:
			// A heartbeat.
			continue
		}
		select {
		case in <- x:
		case <-ctx.Done():
			return
		}
	}
}

// hijacker is the ResponseWriter under w's wrappers (the agent's
// instrumentation) that can hand the connection over: the websocket
// library asserts http.Hijacker on the writer it is given.
func hijacker(w http.ResponseWriter) http.ResponseWriter {
	for {
		if _, ok := w.(http.Hijacker); ok {
			return w
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}
