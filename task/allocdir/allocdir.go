// Package allocdir removes allocation directories (<data-dir>/alloc/<id>,
// the task logs) in the background: those whose records the store's
// retention deleted, and at an agent's start those no record knows. One
// goroutine removes them one after another, in batches, so that
// thousands of directories neither hold up the caller nor start thousands
// of removals at once.
package allocdir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"
)

// idRE is an allocation ID as the runner makes them (a UUID): nothing else
// under the root is ever removed.
var idRE = sync.OnceValue(func() *regexp.Regexp { // compiled on first use, not at every command's start
	return regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
})

// batch is how many directories are removed between two looks at the
// queue (and at ctx); pause is the breath taken between batches, so that
// a large sweep leaves the disk to others now and then.
const (
	batch = 64
	pause = 10 * time.Millisecond
)

// Remover removes allocation directories under Root in its goroutine.
type Remover struct {
	root string
	log  *slog.Logger

	mu      sync.Mutex
	queue   []string
	closed  bool
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	removed int
}

// NewRemover starts a Remover of the directories under root.
func NewRemover(root string, log *slog.Logger) *Remover {
	if log == nil {
		log = slog.Default()
	}
	r := &Remover{root: root, log: log, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

// Root is the directory that holds the allocation directories.
func (r *Remover) Root() string { return r.root }

// Remove queues the directories of these allocations; it never blocks.
// IDs that are not allocation IDs are ignored.
func (r *Remover) Remove(ids ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	for _, id := range ids {
		if idRE().MatchString(id) {
			r.queue = append(r.queue, id)
		}
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Removed is how many directories the Remover has removed.
func (r *Remover) Removed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removed
}

// Pending is how many queued directories are not removed yet.
func (r *Remover) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.queue)
}

func (r *Remover) loop() {
	defer close(r.done)
	for {
		r.mu.Lock()
		n := min(len(r.queue), batch)
		ids := append([]string(nil), r.queue[:n]...)
		r.queue = r.queue[n:]
		if len(r.queue) == 0 {
			r.queue = nil
		}
		more := len(r.queue) > 0
		r.mu.Unlock()
		for _, id := range ids {
			// Its mounts first (a killed agent's secrets tmpfs): removal
			// would empty them and then fail on the mount point.
			if err := Unmount(context.Background(), filepath.Join(r.root, id)); err != nil {
				r.log.Warn("could not unmount in allocation directory", "alloc_id", id, "dir", filepath.Join(r.root, id), "err", err)
				continue
			}
			if err := os.RemoveAll(filepath.Join(r.root, id)); err != nil {
				r.log.Warn("could not remove allocation directory", "alloc_id", id, "dir", filepath.Join(r.root, id), "err", err)
				continue
			}
			r.mu.Lock()
			r.removed++
			r.mu.Unlock()
		}
		if more {
			select {
			case <-r.stop:
				return
			case <-time.After(pause):
			}
			continue
		}
		select {
		case <-r.stop:
			return
		case <-r.wake:
		}
	}
}

// Close removes what is queued, as long as ctx lasts, then stops.
func (r *Remover) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.done
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	for {
		if r.Pending() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			close(r.stop)
			<-r.done
			return fmt.Errorf("allocation directories: %d not removed: %w", r.Pending(), ctx.Err())
		case <-time.After(pause):
		}
	}
	close(r.stop)
	<-r.done
	return nil
}

// Unknown lists the allocation directories under root whose ID known
// does not hold. Directories are listed before known is asked for, so
// that an allocation made meanwhile (its record is written before its
// directory) is never among them.
func Unknown(ctx context.Context, root string, known func(context.Context) (map[string]bool, error)) ([]string, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list allocation directories in %s: %w", root, err)
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() && idRE().MatchString(e.Name()) {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) == 0 {
		return nil, nil
	}
	ids, err := known(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range dirs {
		if !ids[d] {
			out = append(out, d)
		}
	}
	return out, nil
}
