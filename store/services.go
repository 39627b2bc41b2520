package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

const kindService = "service"

// Check statuses, as Consul names them; a check that has not run yet and
// has no initial_status is pending.
const (
	CheckPassing  = "passing"
	CheckWarning  = "warning"
	CheckCritical = "critical"
	CheckPending  = "pending"
)

// Service is one registration in berth's catalog of Nomad's native
// services (provider "nomad"): one service block of one running
// allocation, with the address it resolved to and the state of its checks.
// It is written when the service is registered and whenever its health
// changes, and deleted when it is deregistered; gc deletes those whose
// allocation is gone.
type Service struct {
	// ID is Nomad's: _nomad-task-<alloc>-<task>-<service>-<port label>, or
	// _nomad-task-<alloc>-group-<group>-<service>-<port label>.
	ID          string            `json:"id"`
	ServiceName string            `json:"service_name"`
	Namespace   string            `json:"namespace"`
	JobID       string            `json:"job_id"`
	AllocID     string            `json:"alloc_id"`
	Group       string            `json:"group"`
	Task        string            `json:"task,omitempty"` // empty for a group service
	NodeID      string            `json:"node_id,omitempty"`
	NodeName    string            `json:"node_name,omitempty"`
	Datacenter  string            `json:"datacenter,omitempty"`
	Address     string            `json:"address"`
	Port        int               `json:"port,omitempty"`
	Tags        []string          `json:"tags,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
	// Health is the instance's: the worst status of the checks that count
	// (on_update), passing without checks.
	Health string        `json:"health"`
	Checks []CheckStatus `json:"checks,omitempty"`
	// OwnerPID and OwnerStartTime are the berth process that registered
	// it and runs its checks.
	OwnerPID       int       `json:"owner_pid,omitempty"`
	OwnerStartTime uint64    `json:"owner_start_time,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	ModifiedAt     time.Time `json:"modified_at"`
}

// CheckStatus is the state of one check of a Service.
type CheckStatus struct {
	Name   string `json:"name"`
	Type   string `json:"type"` // http, tcp
	Status string `json:"status"`
	// Output is what the last run said ("HTTP GET http://...: 200 OK", an
	// error); Time is when it ran (zero before the first run).
	Output string    `json:"output,omitempty"`
	Time   time.Time `json:"time,omitempty"`
	// OnUpdate is the check's on_update: require_healthy, ignore_warnings
	// or ignore (it then does not count for Health).
	OnUpdate string `json:"on_update,omitempty"`
}

// Clone returns a deep copy of s.
func (s *Service) Clone() *Service {
	c := *s
	c.Tags = slices.Clone(s.Tags)
	if s.Meta != nil {
		c.Meta = make(map[string]string, len(s.Meta))
		for k, v := range s.Meta {
			c.Meta[k] = v
		}
	}
	c.Checks = slices.Clone(s.Checks)
	return &c
}

// ServiceFilter selects services; zero fields match everything.
type ServiceFilter struct {
	Name    string
	AllocID string
}

func (f ServiceFilter) match(s *Service) bool {
	return (f.Name == "" || s.ServiceName == f.Name) && (f.AllocID == "" || s.AllocID == f.AllocID)
}

// PutService writes a whole registration, setting ModifiedAt (and
// CreatedAt if zero) on s.
func (s *Store) PutService(ctx context.Context, svc *Service) error {
	return s.PutServices(ctx, []*Service{svc})
}

// PutServices writes several registrations in one transaction.
func (s *Store) PutServices(ctx context.Context, svcs []*Service) error {
	t := now()
	for _, svc := range svcs {
		if err := validID(kindService, svc.ID); err != nil {
			return err
		}
		svc.ModifiedAt = t
		if svc.CreatedAt.IsZero() {
			svc.CreatedAt = t
		}
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		for _, svc := range svcs {
			if err := putRecord(tx, bucketServices, kindService, svc.ID, svc); err != nil {
				return fmt.Errorf("service %s: %w", svc.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put services: %w", err)
	}
	return nil
}

// DeleteServices removes registrations by ID; missing ones are not an
// error.
func (s *Store) DeleteServices(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketServices)
		for _, id := range ids {
			if err := b.Delete([]byte(id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete services %s: %w", strings.Join(ids, ", "), err)
	}
	return nil
}

// ListServices returns the registrations matching f, by service name, then
// allocation, then ID. A record that does not decode is skipped (and
// logged once): `berth store check` lists it.
func (s *Store) ListServices(ctx context.Context, f ServiceFilter) ([]*Service, error) {
	var out []*Service
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketServices).ForEach(func(k, raw []byte) error {
			v := new(Service)
			if err := decode(kindService, k, raw, v); err != nil {
				s.warnUnreadable(kindService, string(k), err)
				return nil
			}
			if f.match(v) {
				out = append(out, v)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	SortServices(out)
	return out, nil
}

// SortServices orders registrations by service name, allocation, then ID.
func SortServices(l []*Service) {
	slices.SortFunc(l, func(a, b *Service) int {
		if c := strings.Compare(a.ServiceName, b.ServiceName); c != 0 {
			return c
		}
		if c := strings.Compare(a.AllocID, b.AllocID); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}
