package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/berth/berth/internal/fault"
)

const kindAllocation = "allocation"

// AllocFilter selects allocations; zero fields match everything.
type AllocFilter struct {
	Namespace string
	// JobID matches the job's allocations and, for a periodic job, its
	// children's (Allocation.ParentJobID).
	JobID  string
	Status AllocStatus
	// NonTerminal keeps only allocations that are not complete, failed or lost.
	NonTerminal bool
}

func (f AllocFilter) match(a *Allocation) bool {
	return (f.Namespace == "" || a.Namespace == f.Namespace) &&
		(f.JobID == "" || a.JobID == f.JobID || a.ParentJobID == f.JobID) &&
		(f.Status == "" || a.Status == f.Status) &&
		(!f.NonTerminal || !a.Status.Terminal())
}

// PutAllocation writes a whole allocation record, setting ModifiedAt (and
// CreatedAt if zero) on a as well. When the allocation is terminal, only
// the newest Options.Retention terminal allocations of its job (by
// ModifiedAt) are kept; older ones are deleted in the same transaction.
// Non-terminal allocations are never pruned.
func (s *Store) PutAllocation(ctx context.Context, a *Allocation) error {
	if a == nil {
		return errors.New("put allocation: nil record")
	}
	if err := validID(kindAllocation, a.ID); err != nil {
		return err
	}
	if err := fault.Fail(fault.FailPutAllocation); err != nil {
		return fmt.Errorf("put allocation %s: %w", a.ID, err)
	}
	rec := *a
	rec.ModifiedAt = now()
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = rec.ModifiedAt
	}
	var pruned []string
	err := s.update(ctx, func(tx *bolt.Tx) error {
		// A group commit may run this twice (see commitLoop).
		pruned = nil
		return s.putAlloc(tx, &rec, &pruned)
	})
	if err != nil {
		return fmt.Errorf("put allocation %s: %w", a.ID, err)
	}
	s.pruned(pruned)
	a.CreatedAt, a.ModifiedAt = rec.CreatedAt, rec.ModifiedAt
	return nil
}

func (s *Store) putAlloc(tx *bolt.Tx, rec *Allocation, pruned *[]string) error {
	old, err := getRecord[Allocation](tx, bucketAllocations, kindAllocation, rec.ID)
	switch {
	case errors.Is(err, ErrCorrupt):
		// A whole-record write repairs it; only its index entry, if
		// any, is lost track of (prune skips missing records).
		s.log.Warn("overwriting undecodable allocation record", "alloc_id", rec.ID, "error", err)
	case err != nil && !errors.Is(err, ErrNotFound):
		return err
	}
	return s.writeAlloc(tx, old, rec, pruned)
}

// PutAllocations is PutAllocation of many records in one transaction
// (one lock, one fsync): for callers that write thousands at once.
func (s *Store) PutAllocations(ctx context.Context, as []*Allocation) error {
	recs := make([]Allocation, len(as))
	for i, a := range as {
		if a == nil {
			return errors.New("put allocations: nil record")
		}
		if err := validID(kindAllocation, a.ID); err != nil {
			return err
		}
		recs[i] = *a
		recs[i].ModifiedAt = now()
		if recs[i].CreatedAt.IsZero() {
			recs[i].CreatedAt = recs[i].ModifiedAt
		}
	}
	var pruned []string
	err := s.update(ctx, func(tx *bolt.Tx) error {
		pruned = nil
		for i := range recs {
			if err := s.putAlloc(tx, &recs[i], &pruned); err != nil {
				return fmt.Errorf("allocation %s: %w", recs[i].ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put %d allocations: %w", len(as), err)
	}
	s.pruned(pruned)
	for i, a := range as {
		a.CreatedAt, a.ModifiedAt = recs[i].CreatedAt, recs[i].ModifiedAt
	}
	return nil
}

// AllocationIDs returns the ID of every allocation record, readable or
// not, without decoding any.
func (s *Store) AllocationIDs(ctx context.Context) (map[string]bool, error) {
	ids := map[string]bool{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAllocations).ForEach(func(k, _ []byte) error {
			ids[string(k)] = true
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list allocation IDs: %w", err)
	}
	return ids, nil
}

func (s *Store) pruned(ids []string) {
	if len(ids) > 0 && s.onPrune != nil {
		s.onPrune(ids)
	}
}

// GetAllocation returns the allocation, or an error wrapping ErrNotFound.
func (s *Store) GetAllocation(ctx context.Context, id string) (*Allocation, error) {
	var a *Allocation
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		a, err = getRecord[Allocation](tx, bucketAllocations, kindAllocation, id)
		return err
	})
	return a, err
}

// UpdateAllocation is PutAllocation as a read-modify-write in one
// transaction. If fn returns an error nothing is written.
func (s *Store) UpdateAllocation(ctx context.Context, id string, fn func(*Allocation) error) error {
	var pruned []string
	err := s.update(ctx, func(tx *bolt.Tx) error {
		pruned = nil
		return s.updateAlloc(tx, id, fn, &pruned)
	})
	s.pruned(pruned)
	return err
}

// UpdateAllocations is UpdateAllocation of every ID in one transaction;
// fn is called with each. A missing record is skipped (errs[id] says
// so); an error of fn or of a write is that ID's, and the others are
// still written.
func (s *Store) UpdateAllocations(ctx context.Context, ids []string, fn func(*Allocation) error) (errs map[string]error, err error) {
	var pruned []string
	err = s.update(ctx, func(tx *bolt.Tx) error {
		pruned, errs = nil, map[string]error{}
		for _, id := range ids {
			err := s.updateAlloc(tx, id, fn, &pruned)
			var we *writeError
			if errors.As(err, &we) {
				// The transaction may be half-written for this ID.
				return err
			}
			if err != nil {
				errs[id] = err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("update %d allocations: %w", len(ids), err)
	}
	s.pruned(pruned)
	return errs, nil
}

func (s *Store) updateAlloc(tx *bolt.Tx, id string, fn func(*Allocation) error, pruned *[]string) error {
	a, err := getRecord[Allocation](tx, bucketAllocations, kindAllocation, id)
	if err != nil {
		return err
	}
	// The index entry is keyed by value fields only, so a shallow copy
	// taken before fn runs still finds it.
	old := *a
	if err := fn(a); err != nil {
		return fmt.Errorf("update allocation %s: %w", id, err)
	}
	if a.ID != id {
		return fmt.Errorf("update allocation %s: fn changed the ID to %q", id, a.ID)
	}
	a.ModifiedAt = now()
	if a.CreatedAt.IsZero() {
		a.CreatedAt = a.ModifiedAt
	}
	if err := s.writeAlloc(tx, &old, a, pruned); err != nil {
		return &writeError{fmt.Errorf("update allocation %s: %w", id, err)}
	}
	return nil
}

// writeError is a failed write inside a transaction, which must then be
// rolled back.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// DeleteAllocation removes the allocation; a missing one is not an error.
func (s *Store) DeleteAllocation(ctx context.Context, id string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		old, err := getRecord[Allocation](tx, bucketAllocations, kindAllocation, id)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case errors.Is(err, ErrCorrupt):
			// An undecodable record must still be removable. Its index
			// entry, if any, stays: prune skips missing records.
			s.log.Warn("deleting undecodable allocation record", "alloc_id", id, "error", err)
		case err != nil:
			return err
		default:
			if err := unindexTerminal(tx, old); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketAllocations).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("delete allocation %s: %w", id, err)
	}
	return nil
}

// ListAllocations returns the allocations matching f, newest (by
// CreatedAt) first, ties broken by ID.
func (s *Store) ListAllocations(ctx context.Context, f AllocFilter) ([]*Allocation, error) {
	var out []*Allocation
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAllocations).ForEach(func(k, raw []byte) error {
			a := new(Allocation)
			if err := decode(kindAllocation, k, raw, a); err != nil {
				s.warnUnreadable(kindAllocation, string(k), err)
				a = &Allocation{ID: string(k), Status: AllocUnreadable, StatusDesc: "record unreadable: " + err.Error()}
			}
			if f.match(a) {
				out = append(out, a)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list allocations: %w", err)
	}
	slices.SortFunc(out, func(a, b *Allocation) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// writeAlloc stores a (replacing old, which may be nil), keeps the terminal
// index in step and applies retention to a's job, adding the IDs it
// deleted to pruned.
func (s *Store) writeAlloc(tx *bolt.Tx, old, a *Allocation, pruned *[]string) error {
	if old != nil {
		if err := unindexTerminal(tx, old); err != nil {
			return err
		}
	}
	if err := putRecord(tx, bucketAllocations, kindAllocation, a.ID, a); err != nil {
		return err
	}
	if !a.Status.Terminal() {
		return nil
	}
	job, err := tx.Bucket(bucketTerminal).CreateBucketIfNotExists(jobKey(a))
	if err != nil {
		return fmt.Errorf("index as terminal: %w", err)
	}
	if err := job.Put(terminalKey(a), nil); err != nil {
		return fmt.Errorf("index as terminal: %w", err)
	}
	return s.prune(tx, a, job, pruned)
}

// prune deletes the oldest terminal allocations of a's job beyond the
// retention. Keys sort oldest first. A job normally holds retention+1 of
// them here (more only if Retention was lowered), so reading all is cheap.
func (s *Store) prune(tx *bolt.Tx, a *Allocation, job *bolt.Bucket, pruned *[]string) error {
	// Count with a cursor: Bucket.Stats reads committed pages and would
	// miss this transaction's own writes.
	var keys [][]byte
	c := job.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	if len(keys) <= s.retention {
		return nil
	}
	victims := keys[:len(keys)-s.retention]
	allocs := tx.Bucket(bucketAllocations)
	for _, k := range victims {
		id := k[8:]
		if err := allocs.Delete(id); err != nil {
			return fmt.Errorf("prune allocation %s of job %s: %w", id, a.JobID, err)
		}
		if err := job.Delete(k); err != nil {
			return fmt.Errorf("prune allocation %s of job %s: %w", id, a.JobID, err)
		}
		*pruned = append(*pruned, string(id))
	}
	s.log.Debug("pruned terminal allocations", "namespace", a.Namespace, "job", a.JobID, "deleted", len(victims), "kept", s.retention)
	return nil
}

func unindexTerminal(tx *bolt.Tx, a *Allocation) error {
	if !a.Status.Terminal() {
		return nil
	}
	jk := jobKey(a)
	terminal := tx.Bucket(bucketTerminal)
	job := terminal.Bucket(jk)
	if job == nil {
		return nil
	}
	if err := job.Delete(terminalKey(a)); err != nil {
		return fmt.Errorf("drop terminal index entry: %w", err)
	}
	if k, _ := job.Cursor().First(); k == nil {
		if err := terminal.DeleteBucket(jk); err != nil {
			return fmt.Errorf("drop terminal index entry: %w", err)
		}
	}
	return nil
}

// jobKey separates namespace and job with NUL, which neither may contain.
// jobKey is the retention bucket of a's job: a periodic job's children
// share their parent's, or a job that launches every second would keep
// Retention allocations per launch.
func jobKey(a *Allocation) []byte {
	if a.ParentJobID != "" {
		return []byte(a.Namespace + "\x00" + a.ParentJobID)
	}
	return []byte(a.Namespace + "\x00" + a.JobID)
}

func terminalKey(a *Allocation) []byte {
	k := make([]byte, 8, 8+len(a.ID))
	binary.BigEndian.PutUint64(k, uint64(a.ModifiedAt.UnixNano()))
	return append(k, a.ID...)
}
