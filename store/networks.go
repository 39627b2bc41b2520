package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

const kindNetwork = "network"

// Network is a CNI network berth has attached something to. Its plugins
// keep things on the host by design after the last attachment is gone (the
// bridge, host-local's directory, the shared firewall chains): berth leaves
// them for the next attachment, as every CNI runtime does, and only gc
// tidies them, for the networks listed here, once they have been idle.
type Network struct {
	Name string `json:"name"`
	// ConfList is the configuration the last attachment used.
	ConfList json.RawMessage `json:"conflist,omitempty"`
	// LastUsed is when an attachment of the network was last written.
	LastUsed time.Time `json:"last_used"`
}

// putNetwork records that a's network is in use, in a's own transaction:
// no write of its own.
func putNetwork(tx *bolt.Tx, a *Attachment) error {
	if a.Network == "" || len(a.ConfList) == 0 {
		return nil
	}
	n := Network{Name: a.Network, ConfList: a.ConfList, LastUsed: a.UpdatedAt}
	return putRecord(tx, bucketNetworks, kindNetwork, n.Name, &n)
}

// ListNetworks returns every network berth has used and not yet tidied,
// sorted by name.
func (s *Store) ListNetworks(ctx context.Context) ([]*Network, error) {
	var out []*Network
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		out, err = listRecords[Network](tx, bucketNetworks, kindNetwork, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", err)
	}
	return out, nil
}

// ForgetNetwork drops a tidied network, unless it was used again since
// lastUsed or an attachment of it exists: then it stays, and reports false.
func (s *Store) ForgetNetwork(ctx context.Context, name string, lastUsed time.Time) (bool, error) {
	forgot := false
	err := s.update(ctx, func(tx *bolt.Tx) error {
		forgot = false
		n, err := getRecord[Network](tx, bucketNetworks, kindNetwork, name)
		if err != nil {
			return err
		}
		if !n.LastUsed.Equal(lastUsed) {
			return nil
		}
		inUse := false
		err = tx.Bucket(bucketAttachments).ForEach(func(k, raw []byte) error {
			var a struct {
				Network string `json:"network"`
			}
			if json.Unmarshal(raw, &a) == nil && a.Network == name {
				inUse = true
			}
			return nil
		})
		if err != nil || inUse {
			return err
		}
		forgot = true
		return tx.Bucket(bucketNetworks).Delete([]byte(name))
	})
	if err != nil {
		return false, fmt.Errorf("forget network %s: %w", name, err)
	}
	return forgot, nil
}
