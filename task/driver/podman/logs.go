package podman

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/task/driver"
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

// logTarget is where a task's output goes: <Dir>/<Task>.stdout.N and
// .stderr.N, rotated as the task's logs block says.
type logTarget struct {
	Dir      string `json:"dir"`
	Task     string `json:"task"`
	MaxFiles int    `json:"max_files,omitempty"`
	MaxSize  int64  `json:"max_size,omitempty"`
}

// copyState is what a copier has done, kept beside the raw log so that a
// berth that re-attaches the container goes on where the dead one
// stopped: Offset is the end of the last record written out.
type copyState struct {
	logTarget
	Offset int64 `json:"offset"`
}

func readCopyState(path string) (*copyState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st copyState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &st, nil
}

// logCopier follows a container's k8s-file log into <task>.stdout.N and
// <task>.stderr.N while the task runs and drains it once the task exited.
type logCopier struct {
	src       string
	statePath string
	target    logTarget
	stdout    *logfile.Rotator
	stderr    *logfile.Rotator
	split     logSplitter
	offset    int64
	saved     int64
	interval  time.Duration

	mu       sync.Mutex // serializes drain
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
	err      error
}

// newLogCopier copies src from offset on into the target's files (opened
// with no symlink followed, rotated), recording its progress in
// statePath.
func newLogCopier(src, statePath string, tgt logTarget, offset int64, interval time.Duration) (*logCopier, error) {
	// 0644, Nomad's: the task reads its logs in $NOMAD_ALLOC_DIR/logs.
	stdout, err := logfile.NewRotator(tgt.Dir, tgt.Task+".stdout", tgt.MaxFiles, tgt.MaxSize, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening task log: %w", err)
	}
	stderr, err := logfile.NewRotator(tgt.Dir, tgt.Task+".stderr", tgt.MaxFiles, tgt.MaxSize, 0o644)
	if err != nil {
		stdout.Close()
		return nil, fmt.Errorf("opening task log: %w", err)
	}
	c := &logCopier{
		src:       src,
		statePath: statePath,
		target:    tgt,
		stdout:    stdout,
		stderr:    stderr,
		offset:    offset,
		saved:     -1,
		interval:  interval,
		done:      make(chan struct{}),
	}
	c.split = logSplitter{stdout: stdout, stderr: stderr}
	c.save()
	return c, nil
}

// save records the offset of the last whole record written out (a torn
// record still pending is read again by a successor).
func (c *logCopier) save() {
	if c.statePath == "" {
		return
	}
	committed := c.offset - int64(len(c.split.pending))
	if committed == c.saved {
		return
	}
	b, err := json.Marshal(copyState{logTarget: c.target, Offset: committed})
	if err == nil && driver.WriteFileAtomic(c.statePath, b, 0o600) == nil {
		c.saved = committed
	}
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
	defer c.save()
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

// detach ends following without draining or recording more: the files
// are closed as a dying berth would leave them (tests of Recover).
func (c *logCopier) detach() {
	c.stopOnce.Do(func() {
		if c.cancel != nil {
			c.cancel()
			<-c.done
		}
		c.err = errors.Join(c.stdout.Close(), c.stderr.Close())
	})
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
			c.save()
		}
		if errs := errors.Join(c.stdout.Close(), c.stderr.Close()); err == nil {
			err = errs
		}
		c.err = err
	})
	return c.err
}
