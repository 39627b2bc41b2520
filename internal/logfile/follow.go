package logfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// FollowOptions say how Follow watches a log.
type FollowOptions struct {
	// Done reports whether the writer has finished for good (the task is
	// dead): Follow then returns once it has read the file to its end.
	Done func() bool
	// Poll is how often the end of the file is checked (default 250 ms).
	Poll time.Duration
	// Flush is called after each batch written to w (a chunk of an HTTP
	// response).
	Flush func()
	// OnFile, when set, is called before the bytes of each file are
	// copied, with its index and the offset they start at.
	OnFile func(index int, offset int64)
}

// Follow copies the log dir/name from pos to w: the rest of that file,
// then each newer file name.N, in order, as the Rotator makes them, each
// opened by OpenLog (a planted one ends it with ErrUnsafe). With o.Done
// nil it returns once it has read the newest file to its end; else it
// goes on reading what is written until o.Done is true and everything
// was read, or ctx ends (its error).
func Follow(ctx context.Context, dir, name string, pos Position, w io.Writer, o FollowOptions) error {
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	buf := make([]byte, 32<<10)
	t := time.NewTicker(o.Poll)
	defer t.Stop()
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	cur, orEqual := pos.Index, true // f is name.<cur>; none yet
	for {
		// Asked before the read: what the writer wrote before it was
		// done is in the files by then.
		done := o.Done == nil || o.Done()
		if f != nil {
			n, err := copyToEOF(f, w, buf)
			if err != nil {
				return err
			}
			if n > 0 && o.Flush != nil {
				o.Flush()
			}
		}
		next, err := nextIndex(dir, name, cur, orEqual)
		if err != nil {
			return err
		}
		if next >= 0 {
			nf, err := OpenLog(dir, name+"."+strconv.Itoa(next))
			if errors.Is(err, os.ErrNotExist) {
				// Purged between the listing and the open: look again.
				cur, orEqual = next, false
				continue
			}
			if err != nil {
				return err
			}
			if f != nil {
				// The writer made next after its last write to f:
				// f's rest is complete now.
				if _, err := copyToEOF(f, w, buf); err != nil {
					nf.Close()
					return err
				}
				f.Close()
			}
			var off int64
			if f == nil && next == pos.Index && pos.Offset > 0 {
				if _, err := nf.Seek(pos.Offset, io.SeekStart); err != nil {
					nf.Close()
					return fmt.Errorf("%s: %w", nf.Name(), err)
				}
				off = pos.Offset
			}
			if o.OnFile != nil {
				o.OnFile(next, off)
			}
			f, cur, orEqual = nf, next, false
			continue
		}
		if done {
			if o.Flush != nil {
				o.Flush()
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// nextIndex returns the lowest index of a file name.N after cur (with
// orEqual, cur itself too), or -1 when there is none (yet).
func nextIndex(dir, name string, cur int, orEqual bool) (int, error) {
	idx, err := Indexes(dir, name)
	if err != nil {
		return -1, err
	}
	for _, i := range idx {
		if i > cur || (orEqual && i == cur) {
			return i, nil
		}
	}
	return -1, nil
}

func copyToEOF(f *os.File, w io.Writer, buf []byte) (int64, error) {
	var total int64
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
