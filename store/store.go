package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the layout of buckets and records this code reads and
// writes. Bump it together with a migration in migrations().
const SchemaVersion = 1

const (
	// DBFile and LockFile are the names of the files in the data dir.
	DBFile   = "berth.db"
	LockFile = "berth.lock"

	// DefaultRetention is how many terminal allocations of one job are kept.
	DefaultRetention = 50
	// DefaultTimeout bounds the wait for bbolt's own lock on the db file.
	// Our lock file is taken first and never waits, so this only matters if
	// something other than berth holds the db file.
	DefaultTimeout = time.Second
)

var (
	// ErrNotFound: no record with that ID.
	ErrNotFound = errors.New("not found")
	// ErrLocked: another process (or another Store in this process) owns the data dir.
	ErrLocked = errors.New("data dir is locked")
	// ErrNewerSchema: the store was written by a newer berth.
	ErrNewerSchema = errors.New("store schema is newer than this berth supports")
	// ErrCorrupt: the db file (or a record in it) cannot be read.
	ErrCorrupt = errors.New("store is corrupt")
)

var (
	bucketMeta        = []byte("meta")
	bucketAttachments = []byte("attachments")
	bucketAllocations = []byte("allocations")
	bucketJobs        = []byte("jobs")
	// bucketTerminal indexes terminal allocations: one sub-bucket per job,
	// keys are ModifiedAt (big-endian nanoseconds) followed by the alloc ID,
	// so the oldest come first and retention never has to scan all allocs.
	bucketTerminal = []byte("terminal_allocs")

	keySchemaVersion = []byte("schema_version")
)

func dataBuckets() [][]byte {
	return [][]byte{bucketAttachments, bucketAllocations, bucketJobs, bucketTerminal}
}

// migrations returns, by the version they migrate FROM, the steps that bring
// an older store up to date. Each runs in the same transaction as the version
// bump, so a crash mid-migration leaves the old version intact.
func migrations() map[int]func(*bolt.Tx) error {
	return map[int]func(*bolt.Tx) error{}
}

// Options tune a Store. The zero value is usable.
type Options struct {
	// Retention is how many terminal allocations are kept per job; 0 means
	// DefaultRetention.
	Retention int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Timeout bounds the wait for bbolt's lock on the db file; 0 means
	// DefaultTimeout.
	Timeout time.Duration
}

// Store is berth's durable state: attachments, allocations and jobs in one
// bbolt file, owned by one process at a time. It is safe for concurrent use.
type Store struct {
	db        *bolt.DB
	lock      *dirLock
	path      string
	retention int
	log       *slog.Logger

	closeOnce sync.Once
	closeErr  error

	// Writes go through one committer goroutine that puts every write
	// queued meanwhile into the same transaction: one fsync for many
	// concurrent writers (group commit) instead of one each, in turn.
	opsMu    sync.RWMutex
	closed   bool
	ops      chan writeOp
	loopDone chan struct{}
}

type writeOp struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// maxGroup bounds how many writes share one transaction.
const maxGroup = 256

func (s *Store) commitLoop() {
	defer close(s.loopDone)
	for first := range s.ops {
		group := []writeOp{first}
	drain:
		for len(group) < maxGroup {
			select {
			case o, ok := <-s.ops:
				if !ok {
					break drain
				}
				group = append(group, o)
			default:
				break drain
			}
		}
		err := s.db.Update(func(tx *bolt.Tx) error {
			for _, o := range group {
				if err := o.fn(tx); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil || len(group) == 1 {
			for _, o := range group {
				o.done <- err
			}
			continue
		}
		// One write failed and took the others with it: redo each on its
		// own so that every caller gets its own outcome.
		for _, o := range group {
			o.done <- s.db.Update(o.fn)
		}
	}
}

// Open opens (or creates) <dataDir>/berth.db after taking the data dir's
// lock. It fails with ErrLocked if another Store holds the dir, with
// ErrNewerSchema if a newer berth wrote the store, and with ErrCorrupt if the
// file cannot be read; each error says what to do about it.
func Open(ctx context.Context, dataDir string, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if dataDir == "" {
		return nil, errors.New("open store: empty data dir")
	}
	if opts.Retention < 0 {
		return nil, fmt.Errorf("open store %s: retention %d is negative", dataDir, opts.Retention)
	}
	if opts.Retention == 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dataDir, err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", dataDir, err)
	}

	lock, err := acquireDirLock(dataDir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dataDir, DBFile)
	db, err := openBolt(path, opts.Timeout)
	if err != nil {
		lock.release()
		return nil, err
	}
	s := &Store{db: db, lock: lock, path: path, retention: opts.Retention, log: opts.Logger,
		ops: make(chan writeOp, maxGroup), loopDone: make(chan struct{})}
	if err := s.initSchema(); err != nil {
		_ = db.Close()
		lock.release()
		return nil, err
	}
	go s.commitLoop()
	return s, nil
}

// openBolt opens the db file and checks it through, turning every sign of a
// damaged file (including the panics and memory faults bbolt can hit on
// one) into ErrCorrupt.
func openBolt(path string, timeout time.Duration) (db *bolt.DB, err error) {
	var file *os.File
	bopts := &bolt.Options{
		Timeout: timeout,
		// Capture the file so that it (and bbolt's flock on it) can be
		// released if bbolt panics half-way through Open.
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, err := os.OpenFile(name, flag, perm)
			file = f
			return f, err
		},
	}

	// A truncated file makes bbolt read pages past EOF through its mmap
	// (SIGBUS), a damaged page can send it to a wild page number (SIGSEGV):
	// both are fatal unless this goroutine turns faults into panics.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = db.Close()
			} else if file != nil {
				// The mmap, if any, leaks: bbolt keeps it private.
				_ = file.Close()
			}
			db, err = nil, corruptError(path, fmt.Errorf("bbolt panicked: %v", r))
		}
	}()

	db, err = bolt.Open(path, 0o600, bopts)
	if err != nil {
		switch {
		case errors.Is(err, berrors.ErrTimeout):
			return nil, fmt.Errorf("open store %s: bbolt lock not acquired within %s (is a tool like bbolt or another program holding the file?): %w", path, timeout, ErrLocked)
		case isCorruptOpenError(err):
			return nil, corruptError(path, err)
		default:
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := checkBolt(db, fi.Size()); err != nil {
		_ = db.Close()
		return nil, corruptError(path, err)
	}
	return db, nil
}

// isCorruptOpenError tells a damaged file from an environment problem
// (permissions, ENOMEM, ...). It errs on the side of "not corrupt": telling
// the operator to move a healthy store aside would lose state.
func isCorruptOpenError(err error) bool {
	var pe *fs.PathError
	switch {
	case errors.Is(err, berrors.ErrInvalid),
		errors.Is(err, berrors.ErrVersionMismatch),
		errors.Is(err, berrors.ErrChecksum):
		return true
	case errors.As(err, &pe):
		return false
	case strings.Contains(err.Error(), "file size too small"):
		// bbolt's fileSize() check, returned as a plain error.
		return true
	}
	return false
}

// checkBolt verifies that every page the db references lies inside the file
// and that the page tree is consistent, so that corruption is found at Open
// rather than as a panic in the middle of a later write.
func checkBolt(db *bolt.DB, fileSize int64) error {
	return db.View(func(tx *bolt.Tx) error {
		if need := tx.Size(); need > fileSize {
			return fmt.Errorf("file is %d bytes but its pages need %d (truncated?)", fileSize, need)
		}
		// Read every reachable page here first: this goroutine turns
		// faults into panics, Check's own goroutine does not, and a
		// wild page number in a damaged branch page would kill berth.
		if err := walkBuckets(tx.Cursor(), 0); err != nil {
			return err
		}
		var errs []error
		for err := range tx.Check() {
			if len(errs) < 5 {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

// walkBuckets visits every key of every bucket below c, so that every
// reachable page is read once.
func walkBuckets(c *bolt.Cursor, depth int) error {
	if depth > 16 {
		// berth nests two levels; more means a loop in a damaged tree.
		return errors.New("buckets nested too deep")
	}
	b := c.Bucket()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			continue
		}
		child := b.Bucket(k)
		if child == nil {
			continue
		}
		if err := walkBuckets(child.Cursor(), depth+1); err != nil {
			return err
		}
	}
	return nil
}

func corruptError(path string, cause error) error {
	return fmt.Errorf("open store %s: %w: %v; move it aside (mv %s %s.corrupt) and start berth again with an empty store, then run `berth gc` to sweep the namespaces and CNI attachments the lost store knew about",
		path, ErrCorrupt, cause, path, path)
}

// initSchema creates the buckets of a fresh store, refuses a newer one and
// migrates an older one, all in one transaction.
func (s *Store) initSchema() error {
	var migrated []int
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		version, fresh := 0, meta == nil
		if fresh {
			// A crash between bbolt creating the file and this
			// transaction leaves a file with no buckets at all: fresh.
			nonEmpty := false
			_ = tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				nonEmpty = true
				return nil
			})
			if nonEmpty {
				return corruptError(s.path, errors.New("no meta bucket: not a berth store"))
			}
			version = SchemaVersion
			var err error
			if meta, err = tx.CreateBucket(bucketMeta); err != nil {
				return err
			}
		} else {
			raw := meta.Get(keySchemaVersion)
			v, err := strconv.Atoi(string(raw))
			if err != nil || v < 1 {
				return corruptError(s.path, fmt.Errorf("bad schema version %q", raw))
			}
			version = v
		}
		if version > SchemaVersion {
			return fmt.Errorf("open store %s: %w: the store has schema version %d, this berth knows up to %d: upgrade berth (or move the store aside and run `berth gc`)",
				s.path, ErrNewerSchema, version, SchemaVersion)
		}
		steps := migrations()
		for ; version < SchemaVersion; version++ {
			if step := steps[version]; step != nil {
				if err := step(tx); err != nil {
					return fmt.Errorf("migrate store %s from schema %d: %w", s.path, version, err)
				}
			}
			migrated = append(migrated, version)
		}
		for _, name := range dataBuckets() {
			if tx.Bucket(name) != nil {
				continue
			}
			// Buckets are only ever created together with meta (or by a
			// migration): one missing from an existing store means lost
			// records, which must not pass for an empty list.
			if !fresh {
				return corruptError(s.path, fmt.Errorf("bucket %q is missing", name))
			}
			if _, err := tx.CreateBucket(name); err != nil {
				return fmt.Errorf("create bucket %s in %s: %w", name, s.path, err)
			}
		}
		return meta.Put(keySchemaVersion, []byte(strconv.Itoa(SchemaVersion)))
	})
	if err != nil {
		return err
	}
	for _, from := range migrated {
		s.log.Info("migrated store schema", "path", s.path, "from", from, "to", from+1)
	}
	return nil
}

// Close closes the db and releases the data dir. Calling it again is a no-op.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.opsMu.Lock()
		s.closed = true
		if s.ops != nil {
			close(s.ops)
		}
		s.opsMu.Unlock()
		if s.loopDone != nil {
			<-s.loopDone
		}
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("close store %s: %w", s.path, err)
		}
		s.lock.release()
	})
	return s.closeErr
}

// Path is the db file's path.
func (s *Store) Path() string { return s.path }

// ID names this store among others on the host: berth marks its CNI
// attachments with it (CNI_ARGS BERTH_STORE) so that a sweep by one berth
// never takes another berth's attachments, with another data dir, for
// orphans.
func (s *Store) ID() string { return IDFor(filepath.Dir(s.path)) }

// IDFor is the ID of the store in dataDir.
func IDFor(dataDir string) string {
	if abs, err := filepath.Abs(dataDir); err == nil {
		dataDir = abs
	}
	sum := sha256.Sum256([]byte(filepath.Clean(dataDir)))
	return hex.EncodeToString(sum[:6])
}

// view and update run fn in a read or durable write transaction once ctx is
// checked; bbolt itself cannot be interrupted.
func (s *Store) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(fn)
}

func (s *Store) update(ctx context.Context, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	s.opsMu.RLock()
	if s.closed || s.ops == nil {
		s.opsMu.RUnlock()
		return fmt.Errorf("store %s: %w", s.path, berrors.ErrDatabaseNotOpen)
	}
	s.ops <- writeOp{fn: fn, done: done}
	s.opsMu.RUnlock()
	return <-done
}

// decode unmarshals one record, naming it if the bytes are not valid.
func decode(kind string, key []byte, raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s %s: %w: decode record: %v", kind, key, ErrCorrupt, err)
	}
	return nil
}

func now() time.Time { return time.Now().UTC() }
