package nomadapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	napi "github.com/hashicorp/nomad/api"
)

// LogsRequest is what /v1/client/fs/logs asks of a task's log.
type LogsRequest struct {
	AllocID, Task string
	Type          string // stdout or stderr
	// Origin is where Offset counts from: "start" of the oldest file
	// kept, or "end" of the newest (bytes back, across files).
	Origin string
	Offset int64
	Follow bool
}

// LogSink receives a log as the backend reads it. The answer starts with
// the first call: an error returned before is the request's.
type LogSink interface {
	// File says which file (its name in the alloc dir, e.g.
	// alloc/logs/web.stdout.0) and offset the next bytes come from.
	File(name string, offset int64)
	Write(p []byte) (int, error)
	Flush()
}

// heartbeatEvery is how often an idle followed log sends Nomad's empty
// frame, which tells the client the connection is alive.
const heartbeatEvery = 10 * time.Second

func (s *Server) handleLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := LogsRequest{AllocID: r.PathValue("id"), Task: q.Get("task"), Type: q.Get("type"), Origin: q.Get("origin")}
	if req.Task == "" {
		writeError(w, http.StatusBadRequest, errors.New("must provide task name"))
		return
	}
	if req.Type == "" {
		req.Type = "stdout"
	}
	if req.Type != "stdout" && req.Type != "stderr" {
		writeError(w, http.StatusBadRequest, errors.New("log type must be stdout or stderr"))
		return
	}
	if req.Origin == "" {
		req.Origin = "start"
	}
	if req.Origin != "start" && req.Origin != "end" {
		writeError(w, http.StatusBadRequest, errors.New(`origin must be "start" or "end"`))
		return
	}
	var err error
	if v := q.Get("offset"); v != "" {
		if req.Offset, err = strconv.ParseInt(v, 10, 64); err != nil || req.Offset < 0 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("offset %q: use a number of bytes", v))
			return
		}
	}
	plain := false
	for _, p := range []struct {
		name string
		v    *bool
	}{{"follow", &req.Follow}, {"plain", &plain}} {
		if v := q.Get(p.name); v != "" {
			if *p.v, err = strconv.ParseBool(v); err != nil {
				writeError(w, http.StatusBadRequest, fmt.Errorf("%s %q: use true or false", p.name, v))
				return
			}
		}
	}
	sink := &logSink{w: w, rc: http.NewResponseController(w), plain: plain, follow: req.Follow}
	defer sink.stop()
	err = s.b.AllocLogs(r.Context(), req, sink)
	if err != nil && !sink.started {
		writeErr(w, err)
		return
	}
	sink.start()
	if err != nil && r.Context().Err() == nil {
		s.log.Warn("a log stream ended early", "alloc_id", req.AllocID, "task", req.Task, "err", err)
	}
	sink.Flush()
}

// logSink writes Nomad's log stream: JSON StreamFrames one after another
// (Data base64, the file and its offset), or with plain the bytes only.
type logSink struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	plain  bool
	follow bool

	mu      sync.Mutex
	started bool
	file    string
	offset  int64
	hb      *time.Ticker
	hbDone  chan struct{}
}

// start sends the answer's header, once.
func (s *logSink) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return
	}
	s.started = true
	if s.plain {
		s.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		s.w.Header().Set("Content-Type", "application/json")
	}
	if s.follow {
		// A followed log lasts: the server's deadlines bound requests.
		_ = s.rc.SetReadDeadline(time.Time{})
		_ = s.rc.SetWriteDeadline(time.Time{})
	}
	s.w.WriteHeader(http.StatusOK)
	_ = s.rc.Flush()
	if s.follow && !s.plain {
		s.hb, s.hbDone = time.NewTicker(heartbeatEvery), make(chan struct{})
		go s.heartbeats(s.hb, s.hbDone)
	}
}

func (s *logSink) heartbeats(t *time.Ticker, done chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-t.C:
			s.mu.Lock()
			// Stopped meanwhile: the handler may have returned, and its
			// writer is not ours any more.
			if s.hb != nil {
				_, _ = s.w.Write([]byte("{}"))
				_ = s.rc.Flush()
			}
			s.mu.Unlock()
		}
	}
}

func (s *logSink) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hb != nil {
		s.hb.Stop()
		close(s.hbDone)
		s.hb = nil
	}
}

func (s *logSink) File(name string, offset int64) {
	s.start()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.file, s.offset = name, offset
}

func (s *logSink) Write(p []byte) (int, error) {
	s.start()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plain {
		return s.w.Write(p)
	}
	// Frames of at most 64 KiB, as Nomad's.
	for off := 0; off < len(p); {
		n := min(len(p)-off, 64<<10)
		s.offset += int64(n)
		b, err := json.Marshal(napi.StreamFrame{Data: p[off : off+n], File: s.file, Offset: s.offset})
		if err != nil {
			return off, err
		}
		if _, err := s.w.Write(b); err != nil {
			return off, err
		}
		off += n
	}
	return len(p), nil
}

func (s *logSink) Flush() {
	s.start()
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.rc.Flush()
}
