package store

import (
	"context"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestSvcStore(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	svcs := []*Service{
		{ID: "b2", ServiceName: "web", AllocID: "b", Health: CheckPassing, Tags: []string{"x"}},
		{ID: "a1", ServiceName: "web", AllocID: "a", Health: CheckCritical},
		{ID: "c1", ServiceName: "db", AllocID: "a", Health: CheckPending},
	}
	if err := s.PutServices(ctx, svcs); err != nil {
		t.Fatal(err)
	}
	if svcs[0].CreatedAt.IsZero() || svcs[0].ModifiedAt.IsZero() {
		t.Error("times not set")
	}
	all, err := s.ListServices(ctx, ServiceFilter{})
	if err != nil || len(all) != 3 || all[0].ID != "c1" || all[1].ID != "a1" || all[2].ID != "b2" {
		t.Fatalf("list: %+v, %v; want by name, then allocation", all, err)
	}
	if l, _ := s.ListServices(ctx, ServiceFilter{Name: "web", AllocID: "b"}); len(l) != 1 || l[0].Tags[0] != "x" {
		t.Errorf("filter: %+v", l)
	}
	c := all[2].Clone()
	c.Tags[0] = "changed"
	if all[2].Tags[0] != "x" {
		t.Error("Clone shares tags")
	}
	if err := s.DeleteServices(ctx, "a1", "nope"); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.ListServices(ctx, ServiceFilter{Name: "web"}); len(l) != 1 {
		t.Errorf("after delete: %+v", l)
	}
	// A damaged record is skipped by listings, reported by Unreadable and
	// removable by kind.
	editBolt(t, s.Path(), func(tx *bolt.Tx) error { return tx.Bucket(bucketServices).Put([]byte("bad"), []byte("{")) })
	if l, err := s.ListServices(ctx, ServiceFilter{}); err != nil || len(l) != 2 {
		t.Errorf("list with a damaged record: %d, %v", len(l), err)
	}
	bad, err := s.Unreadable(ctx)
	if err != nil || len(bad) != 1 || bad[0].Kind != "service" || bad[0].ID != "bad" {
		t.Errorf("unreadable: %+v, %v", bad, err)
	}
	if err := s.DeleteRecord(ctx, "service", "bad"); err != nil {
		t.Error(err)
	}
}

// A schema 2 store gets an empty catalog.
func TestSvcMigrate(t *testing.T) {
	ctx := context.Background()
	s, dir := openTest(t, Options{})
	path := s.Path()
	_ = s.Close()
	editBolt(t, path, func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketServices); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("2"))
	})
	s2, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.PutService(ctx, &Service{ID: "x", ServiceName: "web"}); err != nil {
		t.Fatalf("after migration: %v", err)
	}
}
