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
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sync/semaphore"

	"github.com/berth/berth/internal/flock"
)

// SchemaVersion is the layout of buckets and records this code reads and
// writes. Bump it together with a migration in migrations().
const SchemaVersion = 4

const (
	// DBFile is the database in the data dir. Beside it: UsersLockFile,
	// held shared by every open Store for its lifetime (so that MoveAside
	// can refuse while one is open), and TxLockFile, held for the length
	// of one transaction (shared to read, exclusive to write).
	DBFile        = "berth.db"
	UsersLockFile = "berth.lock"
	TxLockFile    = "berth.tx.lock"

	// DefaultRetention is how many terminal allocations of one job are kept.
	DefaultRetention = 50
	// DefaultTimeout bounds the wait for one transaction's lock. Other
	// berth processes hold it for a transaction (a millisecond or two),
	// so waiting this long means something is wrong with its holder.
	DefaultTimeout = 30 * time.Second
)

var (
	// ErrNotFound: no record with that ID.
	ErrNotFound = errors.New("not found")
	// ErrLocked: the data dir is in use where exclusive use is needed
	// (an agent owns it, or MoveAside while a berth has the store open).
	ErrLocked = errors.New("data dir is locked")
	// ErrNewerSchema: the store was written by a newer berth.
	ErrNewerSchema = errors.New("store schema is newer than this berth supports")
	// ErrCorrupt: the db file (or a record in it) cannot be read.
	ErrCorrupt = errors.New("store is corrupt")
	// ErrReplaced: the db file was moved aside or replaced while this
	// Store was open.
	ErrReplaced = errors.New("store file was moved aside or replaced")
)

var (
	bucketMeta        = []byte("meta")
	bucketAttachments = []byte("attachments")
	bucketAllocations = []byte("allocations")
	bucketJobs        = []byte("jobs")
	bucketNetworks    = []byte("networks")
	// bucketServices is the catalog of native services (Service records).
	bucketServices = []byte("services")
	// bucketVariables holds Nomad Variables (Variable records), keyed by
	// namespace, NUL, path; its sequence is their index.
	bucketVariables = []byte("variables")
	// bucketTerminal indexes terminal allocations: one sub-bucket per job,
	// keys are ModifiedAt (big-endian nanoseconds) followed by the alloc ID,
	// so the oldest come first and retention never has to scan all allocs.
	bucketTerminal = []byte("terminal_allocs")

	keySchemaVersion = []byte("schema_version")
)

func dataBuckets() [][]byte {
	return [][]byte{bucketAttachments, bucketAllocations, bucketJobs, bucketTerminal, bucketNetworks, bucketServices, bucketVariables}
}

// migrations returns, by the version they migrate FROM, the steps that bring
// an older store up to date. Each runs in the same transaction as the version
// bump, so a crash mid-migration leaves the old version intact.
func migrations() map[int]func(*bolt.Tx) error {
	return map[int]func(*bolt.Tx) error{
		// 2 adds the networks berth used, filled from the attachments.
		1: func(tx *bolt.Tx) error {
			if _, err := tx.CreateBucketIfNotExists(bucketNetworks); err != nil {
				return err
			}
			return tx.Bucket(bucketAttachments).ForEach(func(k, raw []byte) error {
				var a Attachment
				if json.Unmarshal(raw, &a) != nil {
					return nil // an undecodable record names no network
				}
				return putNetwork(tx, &a)
			})
		},
		// 3 adds the catalog of native services, empty.
		2: func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(bucketServices)
			return err
		},
		// 4 adds Nomad Variables, none.
		3: func(tx *bolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(bucketVariables)
			return err
		},
	}
}

// Options tune a Store. The zero value is usable.
type Options struct {
	// Retention is how many terminal allocations are kept per job; 0 means
	// DefaultRetention.
	Retention int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Timeout bounds the wait for one transaction's lock; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// OnPrune, if set, is called with the IDs of the terminal allocations
	// retention deleted, after the transaction that deleted them
	// committed (so that their directories go with them). It must not
	// block: it runs in the writer's goroutine.
	OnPrune func(ids []string)
}

// Store is berth's durable state: attachments, allocations and jobs in one
// bbolt file. Any number of berth processes may have it open at once: bbolt
// itself allows one writer process, so the file is opened for each
// transaction (or each group of writes) under the data dir's transaction
// lock and closed again, never held between transactions. Nothing slow
// (a plugin call, a task) ever runs inside one. It is safe for concurrent
// use.
type Store struct {
	dir       string
	path      string
	txLock    string
	users     *flock.Lock
	ident     fileIdent
	retention int
	onPrune   func([]string)
	timeout   time.Duration
	log       *slog.Logger
	// gate orders this process's transactions before they take the file
	// lock: shared for a read (weight 1), whole for a write. flock(2)
	// gives a waiting writer no precedence, and the writer polls, so
	// readers of this process overlapping without pause (hundreds of
	// allocations tearing down at once) kept the shared lock held until
	// the writer's deadline passed. The semaphore is FIFO: a waiting
	// writer holds back the readers that come after it, and goes once
	// those before it are done.
	gate *semaphore.Weighted

	closeOnce sync.Once
	// varsMu guards varsCh, closed (and replaced) at each variable
	// write this process commits: what templates reading variables wait
	// on (variables are written by the agent's API, in its process).
	varsMu sync.Mutex
	varsCh chan struct{}
	// warned holds the damaged records already logged.
	warned sync.Map

	// Writes go through one committer goroutine that puts every write
	// queued meanwhile into the same transaction: one lock, one open and
	// one fsync for many concurrent writers (group commit) instead of one
	// each, in turn.
	opsMu    sync.RWMutex
	closed   bool
	ops      chan writeOp
	loopDone chan struct{}
}

type writeOp struct {
	ctx  context.Context
	fn   func(*bolt.Tx) error
	done chan error
}

// gateSize is the weight of a write in Store.gate: more than readers
// ever are at once.
const gateSize = 1 << 30

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
		// The group waits for the lock on behalf of its first writer.
		err := s.withDB(first.ctx, true, func(db *bolt.DB) error {
			err := db.Update(func(tx *bolt.Tx) error {
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
				return nil
			}
			// One write failed and took the others with it: redo each on
			// its own so that every caller gets its own outcome.
			for _, o := range group {
				o.done <- db.Update(o.fn)
			}
			return nil
		})
		if err != nil {
			for _, o := range group {
				o.done <- err
			}
		}
	}
}

// Open opens (or creates) <dataDir>/berth.db. Other berth processes may
// have it open too. It fails with ErrNewerSchema if a newer berth wrote
// the store and with ErrCorrupt if the file cannot be read; each error says
// what to do about it.
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
	users, err := flock.TryAcquire(filepath.Join(dataDir, UsersLockFile), flock.Options{})
	if errors.Is(err, flock.ErrWouldBlock) {
		// Only MoveAside holds it exclusively, for a moment.
		users, err = flock.Acquire(ctx, filepath.Join(dataDir, UsersLockFile), flock.Options{})
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", dataDir, err)
	}
	s := &Store{
		dir: dataDir, path: filepath.Join(dataDir, DBFile), txLock: filepath.Join(dataDir, TxLockFile),
		users: users, retention: opts.Retention, onPrune: opts.OnPrune, timeout: opts.Timeout, log: opts.Logger, gate: semaphore.NewWeighted(gateSize),
		ops: make(chan writeOp, maxGroup), loopDone: make(chan struct{}),
	}
	if err := s.initialize(ctx); err != nil {
		users.Unlock()
		return nil, err
	}
	go s.commitLoop()
	return s, nil
}

// initialize creates or checks the db file under the exclusive
// transaction lock: schema, migrations, and a walk of every page, so that
// corruption is found here rather than in the middle of a later write.
func (s *Store) initialize(ctx context.Context) error {
	// Most opens find a store that needs nothing: it is checked under the
	// shared lock, beside other readers; only a new store or a migration
	// takes the exclusive one.
	if done, err := s.initializeAs(ctx, false); done || err != nil {
		return err
	}
	_, err := s.initializeAs(ctx, true)
	return err
}

func (s *Store) initializeAs(ctx context.Context, write bool) (done bool, err error) {
	if !write {
		// Missing, or empty (bbolt died before it wrote its first
		// pages): made below, under the exclusive lock.
		if fi, err := os.Stat(s.path); err != nil || fi.Size() == 0 {
			return false, nil
		}
	}
	lctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	l, err := flock.Acquire(lctx, s.txLock, flock.Options{Exclusive: write})
	if err != nil {
		return false, fmt.Errorf("open store %s: %w", s.path, err)
	}
	defer l.Unlock()
	db, err := openBolt(s.path, write, true)
	if err != nil {
		return false, err
	}
	defer db.Close()
	fi, err := os.Stat(s.path)
	if err != nil {
		return false, fmt.Errorf("open store %s: %w", s.path, err)
	}
	if !write {
		if !upToDate(db) {
			return false, nil
		}
	} else if err := s.initSchema(db); err != nil {
		return false, err
	}
	s.ident = identOf(fi)
	return true, nil
}

// fileIdent tells the db file this Store opened from one put in its place.
type fileIdent struct{ dev, ino uint64 }

func identOf(fi os.FileInfo) fileIdent {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileIdent{dev: uint64(st.Dev), ino: st.Ino}
	}
	return fileIdent{}
}

// withDB runs fn with the db file open, under the transaction lock:
// shared to read, exclusive to write. A memory fault in bbolt (a damaged
// file) becomes ErrCorrupt instead of killing berth.
func (s *Store) withDB(ctx context.Context, write bool, fn func(*bolt.DB) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	weight := int64(1)
	if write {
		weight = gateSize
	}
	if err := s.gate.Acquire(lctx, weight); err != nil {
		return fmt.Errorf("store %s: wait for this process's other transactions: %w", s.path, err)
	}
	defer s.gate.Release(weight)
	l, err := flock.Acquire(lctx, s.txLock, flock.Options{Exclusive: write})
	if err != nil {
		return fmt.Errorf("store %s: %w", s.path, err)
	}
	defer l.Unlock()

	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var db *bolt.DB
	defer func() {
		if r := recover(); r != nil {
			err = corruptError(s.path, fmt.Errorf("bbolt panicked: %v", r))
		}
		if db != nil {
			// fn's transaction has committed or failed by now: closing
			// (the mmap, the file, bbolt's flock) changes nothing on disk.
			_ = db.Close()
		}
	}()
	db, err = openBolt(s.path, write, false)
	if err != nil {
		return err
	}
	if err := s.checkIdent(db); err != nil {
		return err
	}
	return fn(db)
}

// checkIdent refuses a db file other than the one Open checked: a store
// moved aside under a running berth must not be silently replaced by an
// empty one.
func (s *Store) checkIdent(db *bolt.DB) error {
	fi, err := os.Stat(s.path)
	if err == nil && (s.ident == fileIdent{} || identOf(fi) == s.ident) {
		return nil
	}
	return fmt.Errorf("store %s: %w since this berth opened it: restart it to use the new store", s.path, ErrReplaced)
}

// closeBolt closes a db that is not returned, naming the store.
func closeBolt(path string, db *bolt.DB) error {
	if err := db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", path, err)
	}
	return nil
}

// openBolt opens the db file, turning every sign of a damaged file into
// ErrCorrupt. Only Open (first) creates it, and checks it through; later
// transactions find a missing file an error (it was moved aside), never a
// fresh store.
func openBolt(path string, write, first bool) (db *bolt.DB, err error) {
	create := first && write
	var file *os.File
	bopts := &bolt.Options{
		ReadOnly: !write,
		// Our transaction lock is already held, so bbolt's own flock on
		// the file waits only for a foreign program holding it.
		Timeout: time.Second,
		// Capture the file so that it (and bbolt's flock on it) can be
		// released if bbolt panics half-way through Open; and drop
		// O_CREATE after the first open.
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			if !create {
				flag &^= os.O_CREATE
			}
			f, err := os.OpenFile(name, flag|syscall.O_CLOEXEC, perm)
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
			// Best effort on a damaged file: the corruption is the error
			// to report.
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
			return nil, fmt.Errorf("open store %s: bbolt lock not acquired within a second (is a tool like bbolt or another program holding the file?): %w", path, ErrLocked)
		case !create && errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("store %s: %w since this berth opened it: restart it to use a new store", path, ErrReplaced)
		case isCorruptOpenError(err):
			return nil, corruptError(path, err)
		default:
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	}
	if !first {
		return db, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open store %s: %w", path, err), closeBolt(path, db))
	}
	if err := checkBolt(db, fi.Size()); err != nil {
		return nil, errors.Join(corruptError(path, err), closeBolt(path, db))
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
func (s *Store) initSchema(db *bolt.DB) error {
	if upToDate(db) {
		// Every berth command opens the store: one that needs no change
		// must not cost a write (and its fsyncs).
		return nil
	}
	var migrated []int
	err := db.Update(func(tx *bolt.Tx) error {
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

// upToDate says whether the store already has this schema version and all
// of its buckets.
func upToDate(db *bolt.DB) bool {
	ok := false
	_ = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil || string(meta.Get(keySchemaVersion)) != strconv.Itoa(SchemaVersion) {
			return nil
		}
		for _, name := range dataBuckets() {
			if tx.Bucket(name) == nil {
				return nil
			}
		}
		ok = true
		return nil
	})
	return ok
}

// Close waits for queued writes and lets go of the data dir. Calling it
// again is a no-op.
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
		s.users.Unlock()
	})
	return nil
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
	return s.withDB(ctx, false, func(db *bolt.DB) error { return db.View(fn) })
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
	s.ops <- writeOp{ctx: context.WithoutCancel(ctx), fn: fn, done: done}
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
