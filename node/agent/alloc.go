package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/internal/pty"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
	"github.com/berth/berth/task/driver"
)

// The operator's controls of one allocation: logs (and follow), stop,
// restart, signal and exec. An unknown allocation is 404; one that is not
// running (any more) 409, with what it is.

// writeControlErr maps the runner's control errors to their statuses.
func writeControlErr(w http.ResponseWriter, al *store.Allocation, err error) {
	switch {
	case errors.Is(err, runner.ErrAllocNotRunning):
		writeError(w, http.StatusConflict, "allocation %s is %s, not running: nothing to do (see `berth alloc status %s`)", al.ID, al.Status, shortID(al.ID))
	case errors.Is(err, runner.ErrTaskNotRunning):
		writeError(w, http.StatusConflict, "%v; try again once it runs (see `berth alloc status %s`)", err, shortID(al.ID))
	case errors.Is(err, runner.ErrNoSuchTask):
		writeError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, runner.ErrNotSupported):
		writeError(w, http.StatusNotImplemented, "%v", err)
	default:
		writeErr(w, err)
	}
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func (a *Agent) handleAllocStop(w http.ResponseWriter, r *http.Request) {
	al, err := a.findAlloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	done, err := a.runner.StopAlloc(al.ID)
	if err != nil {
		writeControlErr(w, al, err)
		return
	}
	a.log.Info("stopping allocation (operator)", "alloc_id", al.ID, "job", al.JobID)
	resp := api.AllocStopResponse{AllocID: al.ID}
	if err := a.wait(r.Context(), done); err != nil {
		a.log.Warn("allocation still stopping", "alloc_id", al.ID, "err", err)
		writeJSON(w, http.StatusAccepted, resp)
		return
	}
	resp.Stopped = true
	writeJSON(w, http.StatusOK, resp)
}

// taskParam is the optional ?task= of a control request, checked.
func taskParam(r *http.Request) (string, error) {
	t := r.URL.Query().Get("task")
	if t == "" {
		return "", nil
	}
	return t, validName("task", t)
}

func (a *Agent) handleAllocRestart(w http.ResponseWriter, r *http.Request) {
	al, err := a.findAlloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	task, err := taskParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.set.stopTimeout)
	defer cancel()
	tasks, err := a.runner.RestartAlloc(ctx, al.ID, task)
	if err != nil && len(tasks) == 0 {
		writeControlErr(w, al, err)
		return
	}
	a.log.Info("restarted tasks (operator)", "alloc_id", al.ID, "tasks", strings.Join(tasks, ","))
	code := http.StatusOK
	if err != nil {
		// Asked, still under way.
		code = http.StatusAccepted
	}
	writeJSON(w, code, api.AllocRestartResponse{AllocID: al.ID, Tasks: tasks})
}

func (a *Agent) handleAllocSignal(w http.ResponseWriter, r *http.Request) {
	al, err := a.findAlloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	task, err := taskParam(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	name := r.URL.Query().Get("signal")
	if name == "" {
		name = "SIGKILL"
	}
	sig, ok := parseSignal(name)
	if !ok {
		writeError(w, http.StatusBadRequest, "signal %q: use a name (SIGUSR1, USR1) or a number", name)
		return
	}
	tasks, err := a.runner.SignalAlloc(r.Context(), al.ID, task, sig)
	if err != nil && len(tasks) == 0 {
		writeControlErr(w, al, err)
		return
	}
	a.log.Info("signalled tasks (operator)", "alloc_id", al.ID, "signal", name, "tasks", strings.Join(tasks, ","))
	writeJSON(w, http.StatusOK, api.AllocSignalResponse{AllocID: al.ID, Signal: name, Tasks: tasks})
}

func parseSignal(s string) (syscall.Signal, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		return syscall.Signal(n), n > 0 && n < 65
	}
	sig, ok := jobspec.SignalNumber(s)
	return syscall.Signal(sig), ok
}

// handleLogs serves the task's stdout (or stderr): every file the log
// writer keeps in <data_dir>/alloc/<id>/alloc/logs, <task>.stdout.N,
// oldest first, as Nomad's alloc logs does; from the last tail bytes or
// lines (across files) when asked, and with follow=true what the task
// writes after, until it is dead. The task must be one of the
// allocation's: nothing from the request reaches the path unchecked.
func (a *Agent) handleLogs(w http.ResponseWriter, r *http.Request) {
	al, err := a.findAlloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	task := r.PathValue("task")
	if !hasTask(w, al, task) {
		return
	}
	lq, ok := parseLogQuery(w, r.URL.Query())
	if !ok {
		return
	}
	dead := a.taskDead(al.ID, task)
	dir, name := driver.LogDir(filepath.Join(a.cfg.AllocDir(), al.ID)), task+"."+lq.typ
	pos, ok := a.startTaskLog(r.Context(), w, al, task, lq, dead)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !lq.follow {
		w.WriteHeader(http.StatusOK)
		// The client may hang up mid-copy: nobody to tell. A file
		// planted after startTaskLog's check ends the copy there.
		if err := logfile.Follow(r.Context(), dir, name, pos, w, logfile.FollowOptions{}); err != nil && r.Context().Err() == nil {
			a.log.Warn("reading a log ended early", "alloc_id", al.ID, "task", task, "err", err)
		}
		return
	}
	rc := http.NewResponseController(w)
	// A followed log is a response that lasts: read_timeout bounds the
	// request, not this. (A writer without deadlines needs none lifted.)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()
	err = logfile.Follow(r.Context(), dir, name, pos, w, logfile.FollowOptions{Done: dead, Flush: func() { _ = rc.Flush() }})
	if err != nil && r.Context().Err() == nil {
		a.log.Warn("following a log ended early", "alloc_id", al.ID, "task", task, "err", err)
	}
}

// hasTask reports whether task is one of al's, answering 404 if not.
func hasTask(w http.ResponseWriter, al *store.Allocation, task string) bool {
	var names []string
	for _, t := range al.Tasks {
		if t.Name == task {
			return true
		}
		names = append(names, t.Name)
	}
	writeError(w, http.StatusNotFound, "allocation %s has no task %q (tasks: %s)", al.ID, task, strings.Join(names, ", "))
	return false
}

// logQuery is what a log request asks for.
type logQuery struct {
	typ    string // stdout or stderr
	tail   int64  // the last bytes only (0: all)
	lines  int    // the last lines only (0: all)
	from   int64  // from this many bytes after the start (Nomad's origin start)
	follow bool
}

// parseLogQuery reads a log request's parameters, answering 400 when one
// is bad.
func parseLogQuery(w http.ResponseWriter, q url.Values) (lq logQuery, ok bool) {
	var err error
	lq.typ = q.Get("type")
	if lq.typ == "" {
		lq.typ = "stdout"
	}
	if lq.typ != "stdout" && lq.typ != "stderr" {
		writeError(w, http.StatusBadRequest, "type %q: use stdout or stderr", lq.typ)
		return lq, false
	}
	if s := q.Get("tail"); s != "" {
		if lq.tail, err = strconv.ParseInt(s, 10, 64); err != nil || lq.tail < 0 {
			writeError(w, http.StatusBadRequest, "tail %q: use a number of bytes", s)
			return lq, false
		}
	}
	if s := q.Get("lines"); s != "" {
		if lq.lines, err = strconv.Atoi(s); err != nil || lq.lines < 0 {
			writeError(w, http.StatusBadRequest, "lines %q: use a number of lines", s)
			return lq, false
		}
	}
	if lq.tail > 0 && lq.lines > 0 {
		writeError(w, http.StatusBadRequest, "give tail (bytes) or lines, not both")
		return lq, false
	}
	if s := q.Get("follow"); s != "" {
		if lq.follow, err = strconv.ParseBool(s); err != nil {
			writeError(w, http.StatusBadRequest, "follow %q: use true or false", s)
			return lq, false
		}
	}
	return lq, true
}

// taskDead reports whether the allocation's task is dead (or its
// allocation no longer runs).
func (a *Agent) taskDead(allocID, task string) func() bool {
	return func() bool {
		ts, live := a.runner.TaskStates(allocID)
		if !live {
			return true
		}
		for _, t := range ts {
			if t.Name == task {
				return t.State == "dead"
			}
		}
		return true
	}
}

// startTaskLog finds where the task's log is read from (waiting for it
// when following a task not started yet), as the query asks, answering
// the request itself when it cannot.
func (a *Agent) startTaskLog(ctx context.Context, w http.ResponseWriter, al *store.Allocation, task string, lq logQuery, dead func() bool) (logfile.Position, bool) {
	pos, err := a.taskLogStart(ctx, al, task, lq, dead)
	switch {
	case ctx.Err() != nil:
		return pos, false
	case errors.Is(err, os.ErrNotExist):
		writeError(w, http.StatusNotFound, "%v", err)
		return pos, false
	case errors.Is(err, logfile.ErrUnsafe):
		writeError(w, http.StatusForbidden, "%v", err)
		return pos, false
	case err != nil:
		writeErr(w, err)
		return pos, false
	}
	return pos, true
}

// taskLogStart finds where the task's log is read from: the Nomad API's
// logs come here too.
func (a *Agent) taskLogStart(ctx context.Context, al *store.Allocation, task string, lq logQuery, dead func() bool) (logfile.Position, error) {
	dir, name := driver.LogDir(filepath.Join(a.cfg.AllocDir(), al.ID)), task+"."+lq.typ
	// The task sees alloc/logs: every file there is opened only as
	// logfile.OpenLog allows (a task could plant a symlink or a hard link
	// to /etc/shadow), and Start opens each one it will serve.
	start := func() (logfile.Position, error) {
		if lq.from > 0 {
			return logfile.From(dir, name, lq.from)
		}
		return logfile.Start(dir, name, lq.tail, lq.lines)
	}
	pos, err := start()
	for lq.follow && errors.Is(err, os.ErrNotExist) && !dead() {
		// Not written yet: the task is about to start.
		select {
		case <-ctx.Done():
			return pos, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		pos, err = start()
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		return pos, fmt.Errorf("no %s log for task %s of allocation %s (never written, or its directory was retired): %w", lq.typ, task, al.ID, err)
	case errors.Is(err, logfile.ErrUnsafe):
		return pos, fmt.Errorf("the %s log of task %s of allocation %s is not the file berth's log writer made (a link, or another owner's): not served: %w", lq.typ, task, al.ID, err)
	case err != nil:
		return pos, fmt.Errorf("log %s of allocation %s: %w", name, al.ID, err)
	}
	return pos, nil
}

// maxExecCommandBytes bounds an exec request's command (its JSON).
const maxExecCommandBytes = 64 << 10

// handleExec runs a command beside a task (berth alloc exec): the
// connection is taken over (Upgrade: berth-exec) and carries frames
// (package api) both ways until the command's exit status.
func (a *Agent) handleExec(w http.ResponseWriter, r *http.Request) {
	al, err := a.findAlloc(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	eq, ok := parseExecQuery(w, r)
	if !ok {
		return
	}
	ex, task, err := a.runner.ExecTarget(al.ID, eq.task)
	if err != nil {
		writeControlErr(w, al, err)
		return
	}
	s, err := newExecStdio(eq.tty)
	if err != nil {
		writeErr(w, fmt.Errorf("allocation %s: exec: %w", al.ID, err))
		return
	}
	defer s.close()
	if eq.tty && eq.rows > 0 && eq.cols > 0 {
		// A terminal of the default size is still one: best effort.
		_ = pty.SetSize(s.master, eq.rows, eq.cols)
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeErr(w, fmt.Errorf("allocation %s: exec: take over the connection: %w", al.ID, err))
		return
	}
	defer conn.Close()
	// A failure here shows in the write or flush just below.
	_ = conn.SetDeadline(time.Time{})
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.ExecUpgrade + "\r\n\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	a.log.Info("exec in allocation", "alloc_id", al.ID, "task", task, "cmd", strings.Join(eq.cmd, " "), "tty", eq.tty, "remote", r.RemoteAddr)
	fw := api.NewFrameWriter(brw, brw.Flush)
	res := a.execSession(al.ID, task, ex, eq, s, execClient{
		read:  func(s *execStdio, cancel context.CancelFunc) { s.readClient(brw.Reader, cancel) },
		write: fw.Write,
	})
	b, _ := json.Marshal(res)
	// The client may be gone: nobody to tell then.
	_ = fw.Write(api.FrameExit, b)
}

// execQuery is what an exec request asks for.
type execQuery struct {
	task       string // "" is the group's only task
	cmd        []string
	tty        bool
	rows, cols uint16
}

// parseExecQuery reads an exec request's parameters and checks that it
// asks for the upgrade, answering 400 when not.
func parseExecQuery(w http.ResponseWriter, r *http.Request) (eq execQuery, ok bool) {
	q := r.URL.Query()
	var err error
	if eq.task, err = taskParam(r); err != nil {
		writeErr(w, err)
		return eq, false
	}
	if s := q.Get("command"); len(s) > maxExecCommandBytes {
		writeError(w, http.StatusBadRequest, "command is longer than %d bytes", maxExecCommandBytes)
		return eq, false
	} else if err := json.Unmarshal([]byte(s), &eq.cmd); err != nil || len(eq.cmd) == 0 || eq.cmd[0] == "" {
		writeError(w, http.StatusBadRequest, `command %q: give the command and its arguments as a JSON array, e.g. ["ip","addr"]`, s)
		return eq, false
	}
	if s := q.Get("tty"); s != "" {
		if eq.tty, err = strconv.ParseBool(s); err != nil {
			writeError(w, http.StatusBadRequest, "tty %q: use true or false", s)
			return eq, false
		}
	}
	if eq.tty && q.Get("rows") != "" {
		var rows, cols uint64
		rows, err = strconv.ParseUint(q.Get("rows"), 10, 16)
		if err == nil {
			cols, err = strconv.ParseUint(q.Get("cols"), 10, 16)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "rows %q, cols %q: use the terminal's size", q.Get("rows"), q.Get("cols"))
			return eq, false
		}
		eq.rows, eq.cols = uint16(rows), uint16(cols)
	}
	if !api.HeaderHasToken(r.Header.Get("Connection"), "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), api.ExecUpgrade) {
		writeError(w, http.StatusBadRequest, "exec takes over the connection: send Connection: Upgrade and Upgrade: %s (berth alloc exec does)", api.ExecUpgrade)
		return eq, false
	}
	return eq, true
}

// execClient is the client's end of an exec session: berth's frames, or
// Nomad's websocket (nomad_allocs.go).
type execClient struct {
	// read applies the client's input to s until the client is gone,
	// then calls cancel.
	read func(s *execStdio, cancel context.CancelFunc)
	// write sends output (api.FrameStdout or api.FrameStderr) to the
	// client.
	write func(typ byte, p []byte) error
}

// execSession runs the command with s as its stdio, pumping it from and
// to the client, and returns its result.
func (a *Agent) execSession(allocID, task string, ex driver.Execer, eq execQuery, s *execStdio, c execClient) api.ExecResult {
	// The session ends with the command, with the client's connection
	// (the command is killed), or with the agent.
	ctx, cancel := context.WithCancel(a.jobsCtx)
	defer cancel()
	go c.read(s, cancel)
	var pumps sync.WaitGroup
	s.pump(&pumps, c.write)

	req := &driver.ExecRequest{Cmd: eq.cmd, Stdin: s.childIn, Stdout: s.childOut, Stderr: s.childErr, TTY: eq.tty}
	if eq.tty {
		req.Env = map[string]string{"TERM": "xterm"}
	}
	code, err := ex.Exec(ctx, req)
	s.closeChild()
	// What the command wrote is sent; a process it left behind holding
	// the output open does not keep the session.
	waited := make(chan struct{})
	go func() { pumps.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(2 * time.Second):
		s.closeOutputs()
		<-waited
	}
	res := api.ExecResult{ExitCode: code}
	if err != nil {
		// As a shell says: 127 when there is no such command, 126 when
		// it cannot be run.
		res.ExitCode, res.Error = 126, err.Error()
		if errors.Is(err, driver.ErrCommandNotFound) {
			res.ExitCode = 127
		}
		a.log.Warn("exec in allocation failed", "alloc_id", allocID, "task", task, "err", err)
	}
	return res
}

// execStdio is the command's stdin, stdout and stderr: three pipes, or one
// pty (its slave three times, the master ours).
type execStdio struct {
	tty                         bool
	master                      *os.File // tty only
	childIn, childOut, childErr *os.File
	in, out, errOut             *os.File // our ends (tty: master, master, nil)
	closeOnce                   sync.Once
	sizeMu                      sync.Mutex
	closed                      bool // guarded by sizeMu
}

func newExecStdio(tty bool) (*execStdio, error) {
	s := &execStdio{tty: tty}
	if tty {
		m, sl, err := pty.Open()
		if err != nil {
			return nil, err
		}
		s.master, s.in, s.out = m, m, m
		s.childIn, s.childOut, s.childErr = sl, sl, sl
		return s, nil
	}
	var pipes [3][2]*os.File
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			for _, p := range pipes[:i] {
				p[0].Close()
				p[1].Close()
			}
			return nil, err
		}
		pipes[i] = [2]*os.File{r, w}
	}
	s.childIn, s.in = pipes[0][0], pipes[0][1]
	s.out, s.childOut = pipes[1][0], pipes[1][1]
	s.errOut, s.childErr = pipes[2][0], pipes[2][1]
	return s, nil
}

// readClient applies the client's frames until its connection ends, which
// ends the session (cancel).
func (s *execStdio) readClient(r *bufio.Reader, cancel context.CancelFunc) {
	defer cancel()
	for {
		typ, p, err := api.ReadFrame(r)
		if err != nil {
			return
		}
		switch typ {
		case api.FrameStdin:
			s.stdin(p)
		case api.FrameStdinEOF:
			s.stdinEOF()
		case api.FrameResize:
			if rows, cols, ok := api.ParseResize(p); ok {
				s.resize(rows, cols)
			}
		}
	}
}

// stdin passes the client's input to the command; once the command
// closed its stdin, what follows is dropped.
func (s *execStdio) stdin(p []byte) { _, _ = s.in.Write(p) }

// stdinEOF ends the command's input.
func (s *execStdio) stdinEOF() {
	if s.tty {
		// A terminal's end of input is its EOF character.
		_, _ = s.master.Write([]byte{4})
	} else {
		s.in.Close()
	}
}

// resize sets the terminal's size. A client's reader may still resize
// while the session closes: the master's descriptor is read under
// sizeMu, which close takes.
func (s *execStdio) resize(rows, cols uint16) {
	s.sizeMu.Lock()
	defer s.sizeMu.Unlock()
	if s.tty && !s.closed {
		_ = pty.SetSize(s.master, rows, cols)
	}
}

// pump sends the command's output to the client until EOF.
func (s *execStdio) pump(wg *sync.WaitGroup, write func(typ byte, p []byte) error) {
	copyOut := func(f *os.File, typ byte) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := f.Read(buf)
			if n > 0 && write(typ, buf[:n]) != nil {
				return
			}
			if err != nil {
				// EOF, or EIO from a pty whose slave is closed.
				return
			}
		}
	}
	wg.Add(1)
	go copyOut(s.out, api.FrameStdout)
	if s.errOut != nil {
		wg.Add(1)
		go copyOut(s.errOut, api.FrameStderr)
	}
}

// closeChild closes the command's ends, so that ours see EOF once every
// process that has them is gone.
func (s *execStdio) closeChild() {
	s.closeOnce.Do(func() {
		s.childIn.Close()
		if !s.tty {
			s.childOut.Close()
			s.childErr.Close()
		}
	})
}

func (s *execStdio) closeOutputs() {
	s.out.Close()
	if s.errOut != nil {
		s.errOut.Close()
	}
}

func (s *execStdio) close() {
	s.sizeMu.Lock()
	s.closed = true
	s.sizeMu.Unlock()
	s.closeChild()
	for _, f := range []*os.File{s.in, s.out, s.errOut} {
		if f != nil {
			f.Close()
		}
	}
}
