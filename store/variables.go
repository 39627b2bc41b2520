package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

const kindVariable = "variable"

// ErrCASConflict is matched (errors.Is) by a CASError.
var ErrCASConflict = errors.New("check-and-set conflict")

// Variable is a Nomad Variable: items under a path in a namespace. Its
// indexes are the variables bucket's sequence: each write takes the next.
type Variable struct {
	Namespace   string            `json:"namespace"`
	Path        string            `json:"path"`
	Items       map[string]string `json:"items"`
	CreateIndex uint64            `json:"create_index"`
	ModifyIndex uint64            `json:"modify_index"`
	CreateTime  time.Time         `json:"create_time"`
	ModifyTime  time.Time         `json:"modify_time"`
}

// CASError is a write whose check index is not the variable's: Current
// is the variable as it is (nil when there is none).
type CASError struct {
	Namespace, Path string
	CheckIndex      uint64
	Current         *Variable
}

func (e *CASError) Error() string {
	have := uint64(0)
	if e.Current != nil {
		have = e.Current.ModifyIndex
	}
	return fmt.Sprintf("variable %s (namespace %s): check index %d is not its modify index %d: %s", e.Path, e.Namespace, e.CheckIndex, have, ErrCASConflict)
}

func (e *CASError) Is(target error) bool { return target == ErrCASConflict }

func varKey(ns, path string) []byte { return []byte(ns + "\x00" + path) }

func validVariable(ns, path string) error {
	if path == "" || strings.ContainsRune(path, 0) || strings.ContainsRune(ns, 0) {
		return fmt.Errorf("variable %q (namespace %q): empty path, or a NUL in it", path, ns)
	}
	return nil
}

func getVariable(tx *bolt.Tx, ns, path string) (*Variable, error) {
	raw := tx.Bucket(bucketVariables).Get(varKey(ns, path))
	if raw == nil {
		return nil, nil
	}
	v := new(Variable)
	if err := decode(kindVariable, varKey(ns, path), raw, v); err != nil {
		return nil, err
	}
	return v, nil
}

// PutVariable writes v's items at its namespace and path. With cas set,
// the variable's modify index must be *cas (0: it must not exist), else
// the error is a *CASError. It returns the variable as written.
func (s *Store) PutVariable(ctx context.Context, v *Variable, cas *uint64) (*Variable, error) {
	if err := validVariable(v.Namespace, v.Path); err != nil {
		return nil, err
	}
	var out *Variable
	err := s.update(ctx, func(tx *bolt.Tx) error {
		cur, err := getVariable(tx, v.Namespace, v.Path)
		if err != nil {
			return err
		}
		if err := checkCAS(v.Namespace, v.Path, cas, cur); err != nil {
			return err
		}
		b := tx.Bucket(bucketVariables)
		idx, err := b.NextSequence()
		if err != nil {
			return err
		}
		t := now()
		nv := &Variable{Namespace: v.Namespace, Path: v.Path, Items: maps.Clone(v.Items), CreateIndex: idx, ModifyIndex: idx, CreateTime: t, ModifyTime: t}
		if nv.Items == nil {
			nv.Items = map[string]string{}
		}
		if cur != nil {
			nv.CreateIndex, nv.CreateTime = cur.CreateIndex, cur.CreateTime
		}
		if err := putRecord(tx, bucketVariables, kindVariable, string(varKey(v.Namespace, v.Path)), nv); err != nil {
			return err
		}
		out = nv
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("put variable %s: %w", v.Path, err)
	}
	s.varsWritten()
	return out, nil
}

// VariablesChanged returns a channel closed at the next variable write
// (put or delete) by this process.
func (s *Store) VariablesChanged() <-chan struct{} {
	s.varsMu.Lock()
	defer s.varsMu.Unlock()
	if s.varsCh == nil {
		s.varsCh = make(chan struct{})
	}
	return s.varsCh
}

func (s *Store) varsWritten() {
	s.varsMu.Lock()
	defer s.varsMu.Unlock()
	if s.varsCh != nil {
		close(s.varsCh)
		s.varsCh = nil
	}
}

func checkCAS(ns, path string, cas *uint64, cur *Variable) error {
	if cas == nil {
		return nil
	}
	have := uint64(0)
	if cur != nil {
		have = cur.ModifyIndex
	}
	if have != *cas {
		return &CASError{Namespace: ns, Path: path, CheckIndex: *cas, Current: cur}
	}
	return nil
}

// GetVariable returns a variable, or an error wrapping ErrNotFound.
func (s *Store) GetVariable(ctx context.Context, ns, path string) (*Variable, error) {
	var v *Variable
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		v, err = getVariable(tx, ns, path)
		return err
	})
	if err == nil && v == nil {
		err = fmt.Errorf("variable %s: %w", path, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// DeleteVariable removes a variable; with cas set its modify index must
// be *cas (a *CASError if not). A missing one is not an error without
// cas.
func (s *Store) DeleteVariable(ctx context.Context, ns, path string, cas *uint64) error {
	if err := validVariable(ns, path); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		cur, err := getVariable(tx, ns, path)
		if err != nil {
			return err
		}
		if err := checkCAS(ns, path, cas, cur); err != nil {
			return err
		}
		if cur == nil {
			return nil
		}
		b := tx.Bucket(bucketVariables)
		// A delete is a write too: VariablesIndex moves.
		if _, err := b.NextSequence(); err != nil {
			return err
		}
		return b.Delete(varKey(ns, path))
	})
	if err != nil {
		return fmt.Errorf("delete variable %s: %w", path, err)
	}
	s.varsWritten()
	return nil
}

// ListVariables returns the variables of namespace ns ("" for every
// namespace's) whose path starts with prefix, by namespace and path. A
// record that does not decode is skipped (and logged once).
func (s *Store) ListVariables(ctx context.Context, ns, prefix string) ([]*Variable, error) {
	var out []*Variable
	err := s.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketVariables).Cursor()
		seek := []byte{}
		if ns != "" {
			seek = varKey(ns, prefix)
		}
		for k, raw := c.Seek(seek); k != nil; k, raw = c.Next() {
			kns, kpath, _ := bytes.Cut(k, []byte{0})
			if ns != "" && string(kns) != ns {
				break
			}
			if !strings.HasPrefix(string(kpath), prefix) {
				if ns != "" {
					break
				}
				continue
			}
			v := new(Variable)
			if err := decode(kindVariable, k, raw, v); err != nil {
				s.warnUnreadable(kindVariable, string(k), err)
				continue
			}
			out = append(out, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list variables: %w", err)
	}
	return out, nil
}

// VariablesIndex is the index of the last write of a variable (0: none
// yet): what a blocking query or a watcher compares.
func (s *Store) VariablesIndex(ctx context.Context) (uint64, error) {
	var idx uint64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		idx = tx.Bucket(bucketVariables).Sequence()
		return nil
	})
	return idx, err
}
