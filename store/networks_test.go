package store

import (
	"context"
	"encoding/json"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestNetworks(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	conf := json.RawMessage(`{"name":"n1"}`)
	a := &Attachment{ID: "a1", Network: "n1", ConfList: conf, Phase: PhaseReady}
	if err := s.PutAttachment(ctx, a); err != nil {
		t.Fatal(err)
	}
	nets, err := s.ListNetworks(ctx)
	if err != nil || len(nets) != 1 || nets[0].Name != "n1" || string(nets[0].ConfList) != string(conf) || !nets[0].LastUsed.Equal(a.UpdatedAt) {
		t.Fatalf("ListNetworks = %+v, %v", nets, err)
	}
	used := nets[0].LastUsed
	if ok, err := s.ForgetNetwork(ctx, "n1", used); err != nil || ok {
		t.Errorf("ForgetNetwork with an attachment left: %v, %v; want kept", ok, err)
	}
	if err := s.DeleteAttachment(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ForgetNetwork(ctx, "n1", used.Add(-1)); err != nil || ok {
		t.Errorf("ForgetNetwork used again since: %v, %v; want kept", ok, err)
	}
	if ok, err := s.ForgetNetwork(ctx, "n1", used); err != nil || !ok {
		t.Errorf("ForgetNetwork idle: %v, %v; want forgotten", ok, err)
	}
	if nets, _ := s.ListNetworks(ctx); len(nets) != 0 {
		t.Errorf("after ForgetNetwork: %+v", nets)
	}
}

// TestMigrateNetworks: a schema 1 store gets the networks of its
// attachments.
func TestMigrateNetworks(t *testing.T) {
	ctx := context.Background()
	s, dir := openTest(t, Options{})
	if err := s.PutAttachment(ctx, &Attachment{ID: "a1", Network: "old", ConfList: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	path := s.Path()
	_ = s.Close()
	editBolt(t, path, func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketNetworks); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("1"))
	})
	s2, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	nets, err := s2.ListNetworks(ctx)
	if err != nil || len(nets) != 1 || nets[0].Name != "old" {
		t.Fatalf("networks after migration: %+v, %v", nets, err)
	}
}
