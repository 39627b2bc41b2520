package store

import (
	"context"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestVariables(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t, Options{})
	u64 := func(v uint64) *uint64 { return &v }

	v1, err := s.PutVariable(ctx, &Variable{Namespace: "default", Path: "nomad/jobs/web", Items: map[string]string{"k": "v1"}}, u64(0))
	if err != nil || v1.ModifyIndex == 0 || v1.CreateIndex != v1.ModifyIndex {
		t.Fatalf("create: %+v, %v", v1, err)
	}
	for _, tc := range []struct {
		name string
		cas  *uint64
		want error
	}{
		{"create again with cas 0", u64(0), ErrCASConflict},
		{"stale index", u64(v1.ModifyIndex + 7), ErrCASConflict},
		{"the current index", u64(v1.ModifyIndex), nil},
		{"no cas", nil, nil},
	} {
		_, err := s.PutVariable(ctx, &Variable{Namespace: "default", Path: "nomad/jobs/web", Items: map[string]string{"k": tc.name}}, tc.cas)
		if !errors.Is(err, tc.want) && !(err == nil && tc.want == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		var ce *CASError
		if errors.As(err, &ce) && (ce.Current == nil || ce.Current.Path != "nomad/jobs/web") {
			t.Errorf("%s: conflict without the current variable: %+v", tc.name, ce)
		}
	}
	got, err := s.GetVariable(ctx, "default", "nomad/jobs/web")
	if err != nil || got.Items["k"] != "no cas" || got.CreateIndex != v1.CreateIndex || got.ModifyIndex <= v1.ModifyIndex {
		t.Fatalf("get: %+v, %v", got, err)
	}
	if _, err := s.GetVariable(ctx, "default", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get missing: %v", err)
	}
	for _, p := range []string{"nomad/jobs/web/g", "other/x", "nomad/jobs/db"} {
		if _, err := s.PutVariable(ctx, &Variable{Namespace: "default", Path: p, Items: map[string]string{"a": "b"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutVariable(ctx, &Variable{Namespace: "prod", Path: "nomad/jobs/web", Items: map[string]string{"a": "b"}}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns, prefix string
		want       []string
	}{
		{"default", "nomad/jobs/", []string{"nomad/jobs/db", "nomad/jobs/web", "nomad/jobs/web/g"}},
		{"default", "", []string{"nomad/jobs/db", "nomad/jobs/web", "nomad/jobs/web/g", "other/x"}},
		{"prod", "", []string{"nomad/jobs/web"}},
		{"", "nomad/jobs/web", []string{"nomad/jobs/web", "nomad/jobs/web/g", "nomad/jobs/web"}},
	} {
		l, err := s.ListVariables(ctx, tc.ns, tc.prefix)
		var paths []string
		for _, v := range l {
			paths = append(paths, v.Path)
		}
		if err != nil || len(paths) != len(tc.want) {
			t.Errorf("list %q %q: %v, %v; want %v", tc.ns, tc.prefix, paths, err, tc.want)
			continue
		}
		for i := range paths {
			if paths[i] != tc.want[i] {
				t.Errorf("list %q %q: %v, want %v", tc.ns, tc.prefix, paths, tc.want)
				break
			}
		}
	}
	before, _ := s.VariablesIndex(ctx)
	if err := s.DeleteVariable(ctx, "default", "other/x", u64(1)); !errors.Is(err, ErrCASConflict) {
		t.Errorf("delete with a stale index: %v", err)
	}
	if err := s.DeleteVariable(ctx, "default", "other/x", nil); err != nil {
		t.Fatal(err)
	}
	if after, _ := s.VariablesIndex(ctx); after <= before {
		t.Errorf("a delete left the index at %d", after)
	}
	if err := s.DeleteVariable(ctx, "default", "other/x", nil); err != nil {
		t.Errorf("delete a missing one: %v", err)
	}
	// A damaged record is skipped by listings and reported.
	editBolt(t, s.Path(), func(tx *bolt.Tx) error {
		return tx.Bucket(bucketVariables).Put(varKey("default", "bad"), []byte("{"))
	})
	if l, err := s.ListVariables(ctx, "default", ""); err != nil || len(l) != 3 {
		t.Errorf("list with a damaged record: %d, %v", len(l), err)
	}
	if bad, err := s.Unreadable(ctx); err != nil || len(bad) != 1 || bad[0].Kind != "variable" {
		t.Errorf("unreadable: %+v, %v", bad, err)
	}
}
