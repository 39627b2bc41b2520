package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

const kindJob = "job"

// JobRecord is a submitted job as the agent stored it.
type JobRecord struct {
	ID   string
	Spec json.RawMessage
}

// PutJob stores a job's spec, which must be valid JSON; the store does not
// look inside it.
func (s *Store) PutJob(ctx context.Context, id string, spec json.RawMessage) error {
	if err := validID(kindJob, id); err != nil {
		return err
	}
	if !json.Valid(spec) {
		return fmt.Errorf("put job %s: spec is not valid JSON", id)
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).Put([]byte(id), spec)
	})
	if err != nil {
		return fmt.Errorf("put job %s: %w", id, err)
	}
	return nil
}

// GetJob returns a job's spec, or an error wrapping ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (json.RawMessage, error) {
	var spec json.RawMessage
	err := s.view(ctx, func(tx *bolt.Tx) error {
		raw := tx.Bucket(bucketJobs).Get([]byte(id))
		if raw == nil {
			return fmt.Errorf("%s %s: %w", kindJob, id, ErrNotFound)
		}
		// bbolt's bytes are only valid inside the transaction.
		spec = bytes.Clone(raw)
		return nil
	})
	return spec, err
}

// ListJobs returns every job, sorted by ID.
func (s *Store) ListJobs(ctx context.Context) ([]JobRecord, error) {
	var out []JobRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).ForEach(func(k, raw []byte) error {
			out = append(out, JobRecord{ID: string(k), Spec: bytes.Clone(raw)})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return out, nil
}

// DeleteJob removes a job; a missing one is not an error. Its allocations
// are left alone: they are removed by retention or by the caller.
func (s *Store) DeleteJob(ctx context.Context, id string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	return nil
}
