package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

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

// listRecords returns the records in key (ID) order. A record that does
// not decode is returned as stub(id, err) when stub is set (see
// PhaseUnreadable), and fails the listing otherwise.
func listRecords[T any](tx *bolt.Tx, bucket []byte, kind string, stub func(id string, err error) *T) ([]*T, error) {
	var out []*T
	err := tx.Bucket(bucket).ForEach(func(k, raw []byte) error {
		v := new(T)
		if err := decode(kind, k, raw, v); err != nil {
			if stub == nil {
				return err
			}
			v = stub(string(k), err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// UnreadableRecord is a record whose bytes do not decode.
type UnreadableRecord struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
	Err  string `json:"error"`
}

// warnUnreadable logs a damaged record once per process, not at every
// listing.
func (s *Store) warnUnreadable(kind, id string, err error) {
	if _, seen := s.warned.LoadOrStore(kind+"/"+id, true); !seen {
		s.log.Warn("store record cannot be decoded; listed as unreadable (see `berth store check`, remove with `berth store rm`)",
			"kind", kind, "id", id, "err", err)
	}
}

// recordKinds maps the kinds `berth store` names to their buckets.
func recordKinds() map[string][]byte {
	return map[string][]byte{
		kindAttachment: bucketAttachments,
		kindAllocation: bucketAllocations,
		kindJob:        bucketJobs,
		kindNetwork:    bucketNetworks,
		kindService:    bucketServices,
		kindVariable:   bucketVariables,
	}
}

// Unreadable scans every record and lists those that do not decode.
func (s *Store) Unreadable(ctx context.Context) ([]UnreadableRecord, error) {
	var out []UnreadableRecord
	err := s.view(ctx, func(tx *bolt.Tx) error {
		kinds := recordKinds()
		names := make([]string, 0, len(kinds))
		for k := range kinds {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, kind := range names {
			err := tx.Bucket(kinds[kind]).ForEach(func(k, raw []byte) error {
				if err := decodeKind(kind, raw); err != nil {
					out = append(out, UnreadableRecord{Kind: kind, ID: string(k), Err: err.Error()})
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan for unreadable records: %w", err)
	}
	return out, nil
}

// decodeKind decodes raw as a record of kind would be.
func decodeKind(kind string, raw []byte) error {
	var v any
	switch kind {
	case kindAttachment:
		v = new(Attachment)
	case kindAllocation:
		v = new(Allocation)
	case kindNetwork:
		v = new(Network)
	case kindService:
		v = new(Service)
	case kindVariable:
		v = new(Variable)
	default:
		// Jobs are the agent's JSON: the store only asks that it is JSON.
		if !json.Valid(raw) {
			return fmt.Errorf("not valid JSON")
		}
		return nil
	}
	return json.Unmarshal(raw, v)
}

// DeleteRecord removes one record by kind ("attachment", "allocation",
// "job", "network", "service", "variable": namespace NUL path) and ID,
// whatever its bytes: the way out for a damaged
// record. A missing one is not an error.
func (s *Store) DeleteRecord(ctx context.Context, kind, id string) error {
	bucket, ok := recordKinds()[kind]
	if !ok {
		return fmt.Errorf("delete record: unknown kind %q: use attachment, allocation, job, network, service or variable", kind)
	}
	if err := validID(kind, id); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		// Its terminal index entry, if any, stays: prune skips missing
		// records.
		return tx.Bucket(bucket).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", kind, id, err)
	}
	return nil
}

func validID(kind, id string) error {
	if id == "" {
		return fmt.Errorf("%s: empty ID", kind)
	}
	return nil
}
