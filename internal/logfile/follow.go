package logfile

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"time"
)

// TailLines returns the offset in f at which its last n lines start (a
// last line without its newline counts as one). It reads backwards, at
// most what those lines hold plus a block.
func TailLines(f *os.File, n int) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := fi.Size()
	if n <= 0 {
		return end, nil
	}
	const block = 32 << 10
	buf := make([]byte, block)
	pos := end
	seen := 0
	// A final newline ends the last line; it does not start another.
	skipLast := true
	for pos > 0 {
		size := int64(block)
		if pos < size {
			size = pos
		}
		pos -= size
		b := buf[:size]
		if _, err := f.ReadAt(b, pos); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != '\n' {
				continue
			}
			if skipLast && pos+int64(i) == end-1 {
				continue
			}
			seen++
			if seen == n {
				return pos + int64(i) + 1, nil
			}
		}
		skipLast = false
	}
	return 0, nil
}

// TailBytes returns the offset in f of its last n bytes.
func TailBytes(f *os.File, n int64) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if n <= 0 || fi.Size() <= n {
		if n <= 0 {
			return fi.Size(), nil
		}
		return 0, nil
	}
	return fi.Size() - n, nil
}

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
}

// Follow copies f, the log dir/name opened by OpenLog, from its
// current offset to w, then what is appended to it, following the
// Rotator's rotation: when dir/name is a new file, the rest of the old
// one is copied, then the new one from its start. It returns nil once
// o.Done is true and everything was read, or ctx's error. It closes f.
func Follow(ctx context.Context, dir, name string, f *os.File, w io.Writer, o FollowOptions) error {
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	defer func() { f.Close() }()
	buf := make([]byte, 32<<10)
	t := time.NewTicker(o.Poll)
	defer t.Stop()
	for {
		// Asked before the read: what the writer wrote before it was
		// done is in the file by then.
		done := o.Done != nil && o.Done()
		n, err := copyToEOF(f, w, buf)
		if err != nil {
			return err
		}
		if n > 0 && o.Flush != nil {
			o.Flush()
		}
		if next := rotated(dir, name, f); next != nil {
			// The old file is complete: read its rest, then the new one.
			if _, err := copyToEOF(f, w, buf); err != nil {
				next.Close()
				return err
			}
			f.Close()
			f = next
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

// rotated returns the file that follows f in the rotation when f is no
// longer dir/name (the Rotator renamed it to name.K: the next is name.K-1,
// or name itself for K = 1), or nil while f is still dir/name. Following
// the chain, not jumping to dir/name, loses nothing when the writer
// rotated more than once between two looks.
func rotated(dir, name string, f *os.File) *os.File {
	cur, err := f.Stat()
	if err != nil {
		return nil
	}
	same := func(n string) (*os.File, bool) {
		nf, err := OpenLog(dir, n)
		if err != nil {
			return nil, false
		}
		fi, err := nf.Stat()
		if err != nil {
			nf.Close()
			return nil, false
		}
		if os.SameFile(cur, fi) {
			nf.Close()
			return nil, true
		}
		return nf, false
	}
	head, isHead := same(name)
	if isHead {
		return nil
	}
	if head == nil {
		// The name is between a rename and its new file: next look.
		return nil
	}
	prev := head // name.(k-1), starting with name itself
	for k := 1; k <= maxRotated; k++ {
		nf, isF := same(name + "." + strconv.Itoa(k))
		if isF {
			if prev != head {
				head.Close()
			}
			return prev
		}
		if nf == nil {
			break
		}
		if prev != head {
			prev.Close()
		}
		prev = nf
	}
	// f was deleted (rotated past max_files): carry on with the oldest
	// file left, if other than the newest, else the newest.
	if prev != head {
		head.Close()
	}
	return prev
}

// maxRotated bounds the rotated files rotated looks at.
const maxRotated = 1000
