package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/store"
)

// The graph is built once, over the settings; nothing outside the data
// dir is touched.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	cfg := Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.LockDir = filepath.Join(t.TempDir(), "lock")
	n, err := New(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Validating a job opens nothing.
	job := filepath.Join(t.TempDir(), "j.nomad.hcl")
	if err := os.WriteFile(job, []byte(`job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := jobspec.ParseFile(job, n.ParseOptions(ctx)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("data dir before Open: %v", err)
	}
	if n.Store != nil || n.Attach != nil {
		t.Fatal("store before Open")
	}
	if err := n.OpenStore(ctx); err != nil {
		t.Fatal(err)
	}
	if n.Store == nil || n.Attach == nil || n.Attach.ConfDir() != cfg.CNIConfigDir || n.OwnerPID != os.Getpid() {
		t.Errorf("node: %+v", n)
	}
	o := n.GCOptions()
	if o.Store != n.Store || o.Attach != n.Attach || o.LockDir != cfg.LockDir || o.StoreID != n.Store.ID() || o.OpenDriver == nil {
		t.Errorf("gc options: %+v", o)
	}
	// A driver gc opens is the node's, and gc's Close leaves it open.
	d, err := o.OpenDriver(ctx, "raw_exec")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Drivers.Made()["raw_exec"]; !ok {
		t.Error("driver gc opened is not the node's")
	}
	if _, ok := n.GCOptions().Drivers["raw_exec"]; !ok {
		t.Error("a driver made is not given to gc")
	}
	if n.Runner() == nil {
		t.Fatal("no runner")
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if len(n.Drivers.Made()) != 0 {
		t.Error("drivers not closed")
	}
}

func TestOpenWithoutStore(t *testing.T) {
	cfg := Default()
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	n, err := New(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	why := errors.New("damaged")
	n.OpenWithoutStore(why)
	o := n.GCOptions()
	if o.Store != nil || o.StoreErr != why || o.Attach == nil || o.StoreID != store.IDFor(cfg.DataDir) {
		t.Errorf("gc options: %+v", o)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	cfg := Default()
	cfg.DataDir = "rel"
	if _, err := New(context.Background(), cfg, Options{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("got %v", err)
	}
}
