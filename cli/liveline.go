package cli

import (
	"io"
	"sync"
)

// liveLine is a status line kept at the bottom of a terminal, as apt and
// cargo keep theirs: whatever else is printed (result lines on stdout, log
// records on stderr) goes above it, and the line is drawn again below.
// Every write that may reach the terminal while it is shown goes through
// Above.
type liveLine struct {
	mu     sync.Mutex
	term   io.Writer // where the line is drawn
	status string
	drawn  bool
}

// set replaces the line's text and draws it.
func (l *liveLine) set(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.status = s
	l.drawLocked()
}

func (l *liveLine) drawLocked() {
	if l.status == "" {
		return
	}
	io.WriteString(l.term, "\r\033[K"+l.status)
	l.drawn = true
}

func (l *liveLine) eraseLocked() {
	if l.drawn {
		io.WriteString(l.term, "\r\033[K")
		l.drawn = false
	}
}

// above writes p (whole lines) to w above the line.
func (l *liveLine) above(w io.Writer, p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.eraseLocked()
	n, err := w.Write(p)
	l.drawLocked()
	return n, err
}

// writer is w with every write printed above the line.
func (l *liveLine) writer(w io.Writer) io.Writer { return aboveWriter{l, w} }

// clear removes the line from the screen; keep leaves its last text there
// as a finished line instead.
func (l *liveLine) clear(keep bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if keep && l.drawn {
		io.WriteString(l.term, "\n")
		l.drawn = false
	}
	l.eraseLocked()
	l.status = ""
}

type aboveWriter struct {
	l *liveLine
	w io.Writer
}

func (a aboveWriter) Write(p []byte) (int, error) { return a.l.above(a.w, p) }

// switchWriter is the log's output: stderr, or stderr above a live line
// while one is shown.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	w := s.w
	s.mu.Unlock()
	return w.Write(p)
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}
