package store

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Generic helpers over one bucket of JSON records keyed by ID. kind names
// the record in errors ("attachment", "allocation", "job").

func getRecord[T any](tx *bolt.Tx, bucket []byte, kind, id string) (*T, error) {
	raw := tx.Bucket(bucket).Get([]byte(id))
	if raw == nil {
		return nil, fmt.Errorf("%s %s: %w", kind, id, ErrNotFound)
	}
	v := new(T)
	if err := decode(kind, []byte(id), raw, v); err != nil {
		return nil, err
	}
	return v, nil
}

// putRecord leaves naming the record to the caller's error wrapping.
func putRecord(tx *bolt.Tx, bucket []byte, kind, id string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s record: %w", kind, err)
	}
	return tx.Bucket(bucket).Put([]byte(id), raw)
}

// listRecords returns the records in key (ID) order.
func listRecords[T any](tx *bolt.Tx, bucket []byte, kind string) ([]*T, error) {
	var out []*T
	err := tx.Bucket(bucket).ForEach(func(k, raw []byte) error {
		v := new(T)
		if err := decode(kind, k, raw, v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

func validID(kind, id string) error {
	if id == "" {
		return fmt.Errorf("%s: empty ID", kind)
	}
	return nil
}
