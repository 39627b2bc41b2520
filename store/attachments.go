package store

import (
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

const kindAttachment = "attachment"

// PutAttachment writes a (new or whole) attachment record and returns once
// it is on disk, so a side effect started afterwards is always recorded.
// It sets UpdatedAt, and CreatedAt if it is zero, on a as well.
func (s *Store) PutAttachment(ctx context.Context, a *Attachment) error {
	if a == nil {
		return errors.New("put attachment: nil record")
	}
	if err := validID(kindAttachment, a.ID); err != nil {
		return err
	}
	rec := *a
	rec.UpdatedAt = now()
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = rec.UpdatedAt
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		if err := putRecord(tx, bucketAttachments, kindAttachment, rec.ID, &rec); err != nil {
			return err
		}
		return putNetwork(tx, &rec)
	})
	if err != nil {
		return fmt.Errorf("put attachment %s: %w", a.ID, err)
	}
	a.CreatedAt, a.UpdatedAt = rec.CreatedAt, rec.UpdatedAt
	return nil
}

// GetAttachment returns the attachment, or an error wrapping ErrNotFound.
func (s *Store) GetAttachment(ctx context.Context, id string) (*Attachment, error) {
	var a *Attachment
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		a, err = getRecord[Attachment](tx, bucketAttachments, kindAttachment, id)
		return err
	})
	return a, err
}

// DeleteAttachment removes the record; a missing one is not an error, so
// that a teardown retried after a crash can always finish with it.
func (s *Store) DeleteAttachment(ctx context.Context, id string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAttachments).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("delete attachment %s: %w", id, err)
	}
	return nil
}

// ListAttachments returns every attachment, sorted by ID.
func (s *Store) ListAttachments(ctx context.Context) ([]*Attachment, error) {
	var out []*Attachment
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		out, err = listRecords(tx, bucketAttachments, kindAttachment, func(id string, err error) *Attachment {
			s.warnUnreadable(kindAttachment, id, err)
			return &Attachment{ID: id, Phase: PhaseUnreadable, LastError: err.Error()}
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list attachments: %w", err)
	}
	return out, nil
}

// UpdateAttachment reads the attachment, lets fn change it and writes it
// back in one transaction: no other writer can interleave. If fn returns an
// error nothing is written and that error is returned (wrapped). fn may run
// while other writers wait, so it must not block on I/O.
func (s *Store) UpdateAttachment(ctx context.Context, id string, fn func(*Attachment) error) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		a, err := getRecord[Attachment](tx, bucketAttachments, kindAttachment, id)
		if err != nil {
			return err
		}
		if err := fn(a); err != nil {
			return fmt.Errorf("update attachment %s: %w", id, err)
		}
		if a.ID != id {
			return fmt.Errorf("update attachment %s: fn changed the ID to %q", id, a.ID)
		}
		a.UpdatedAt = now()
		if a.CreatedAt.IsZero() {
			a.CreatedAt = a.UpdatedAt
		}
		if err := putRecord(tx, bucketAttachments, kindAttachment, id, a); err != nil {
			return fmt.Errorf("update attachment %s: %w", id, err)
		}
		return putNetwork(tx, a)
	})
}
