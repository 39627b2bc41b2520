package podman

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Task output goes through conmon's k8s-file log: conmon writes it
// directly, so copying it costs no API round trip, unlike streaming
// GET /containers/{id}/logs. Each line of that file is
//
//	<RFC3339Nano time> <stdout|stderr> <F|P> <content>\n
//
// where P marks a partial line (no newline in the original output).

// logSplitter turns k8s-file lines into the two plain streams.
type logSplitter struct {
	stdout, stderr io.Writer
	pending        []byte // an incomplete k8s-file line from the last read
}

func (s *logSplitter) write(p []byte) error {
	data := p
	if len(s.pending) > 0 {
		data = append(s.pending, p...)
		s.pending = nil
	}
	for {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			break
		}
		if err := s.line(data[:nl]); err != nil {
			return err
		}
		data = data[nl+1:]
	}
	if len(data) > 0 {
		s.pending = append([]byte(nil), data...)
	}
	return nil
}

func (s *logSplitter) line(l []byte) error {
	// time
	sp := bytes.IndexByte(l, ' ')
	if sp < 0 {
		return nil
	}
	l = l[sp+1:]
	sp = bytes.IndexByte(l, ' ')
	if sp < 0 {
		return nil
	}
	stream := string(l[:sp])
	l = l[sp+1:]
	full := true
	if len(l) > 0 && (l[0] == 'P' || l[0] == 'F') {
		full = l[0] == 'F'
		l = l[1:]
		if len(l) > 0 && l[0] == ' ' {
			l = l[1:]
		}
	}
	w := s.stdout
	if stream == "stderr" {
		w = s.stderr
	}
	if _, err := w.Write(l); err != nil {
		return err
	}
	if full {
		_, err := w.Write([]byte{'\n'})
		return err
	}
	return nil
}

// logCopier follows a container's k8s-file log into <task>.stdout and
// <task>.stderr while the task runs and drains it once the task exited.
type logCopier struct {
	src      string
	stdout   *os.File
	stderr   *os.File
	split    logSplitter
	offset   int64
	interval time.Duration

	mu       sync.Mutex // serializes drain
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
	err      error
}

func newLogCopier(src, stdoutPath, stderrPath string, interval time.Duration) (*logCopier, error) {
	const flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	stdout, err := os.OpenFile(stdoutPath, flags, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening task log %s: %w", stdoutPath, err)
	}
	stderr, err := os.OpenFile(stderrPath, flags, 0o644)
	if err != nil {
		stdout.Close()
		return nil, fmt.Errorf("opening task log %s: %w", stderrPath, err)
	}
	c := &logCopier{
		src:      src,
		stdout:   stdout,
		stderr:   stderr,
		interval: interval,
		done:     make(chan struct{}),
	}
	c.split = logSplitter{stdout: stdout, stderr: stderr}
	return c, nil
}

// start follows the log in a goroutine until stop is called.
func (c *logCopier) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		t := time.NewTicker(c.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// Errors are kept for the final drain to report.
				_ = c.drain()
			}
		}
	}()
}

// drain copies whatever conmon appended since the last call.
func (c *logCopier) drain() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.Open(c.src)
	if errors.Is(err, os.ErrNotExist) {
		return nil // conmon has not written anything yet
	}
	if err != nil {
		return fmt.Errorf("reading container log %s: %w", c.src, err)
	}
	defer f.Close()
	if _, err := f.Seek(c.offset, io.SeekStart); err != nil {
		return fmt.Errorf("reading container log %s: %w", c.src, err)
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			c.offset += int64(n)
			if err := c.split.write(buf[:n]); err != nil {
				return fmt.Errorf("writing task log: %w", err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("reading container log %s: %w", c.src, rerr)
		}
	}
}

// stop ends following, copies the rest and closes the task's log files.
// Only call it once conmon has stopped writing (the container exited or was
// removed), or the tail would be lost. Safe to call more than once.
func (c *logCopier) stop() error {
	c.stopOnce.Do(func() {
		if c.cancel != nil {
			c.cancel()
			<-c.done
		}
		err := c.drain()
		if err == nil && len(c.split.pending) > 0 {
			// conmon ends every record with a newline; a torn last record
			// is still output the task wrote.
			err = c.split.line(c.split.pending)
			c.split.pending = nil
		}
		if errs := errors.Join(c.stdout.Close(), c.stderr.Close()); err == nil {
			err = errs
		}
		c.err = err
	})
	return c.err
}
