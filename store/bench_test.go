package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
)

// Every write is a bbolt commit with fdatasync, so these measure the disk
// under t.TempDir() as much as the code: run them on the file system the
// data dir will live on.

func benchAttachment(id string) *Attachment {
	return &Attachment{
		ID: id, NetnsPath: "/run/netns/berth-" + id, Network: "bridge", IfName: "eth0",
		ConfList: json.RawMessage(`{"cniVersion":"1.0.0","name":"bridge","plugins":[{"type":"bridge","bridge":"berth0","ipam":{"type":"host-local","subnet":"10.199.0.0/24"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`),
		Result:   json.RawMessage(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/x"}],"ips":[{"address":"10.199.0.5/24","gateway":"10.199.0.1","interface":0}]}`),
		Phase:    PhaseIntent, OwnerPID: 1234, OwnerStartTime: 5678, AllocID: id,
	}
}

func BenchmarkPutAttachment(b *testing.B) {
	ctx := context.Background()
	s, _ := openTest(b, Options{})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := s.PutAttachment(ctx, benchAttachment(fmt.Sprint("att-", i%1000))); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPutAttachmentParallel: writers queue on bbolt's single writer
// lock, each commit still paying its own fsync.
func BenchmarkPutAttachmentParallel(b *testing.B) {
	ctx := context.Background()
	s, _ := openTest(b, Options{})
	var n atomic.Int64
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.PutAttachment(ctx, benchAttachment(fmt.Sprint("att-", n.Add(1)%1000))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkUpdateAllocation(b *testing.B) {
	ctx := context.Background()
	s, _ := openTest(b, Options{})
	// A realistic record: a few tasks and a timeline.
	a := &Allocation{ID: "alloc", JobID: "web", Group: "g", Status: AllocRunning,
		Tasks:   []TaskState{{Name: "a", Driver: "podman", Handle: &TaskHandle{Driver: "podman", ContainerID: "c"}}, {Name: "b", Driver: "exec"}},
		Network: &NetworkStatus{Mode: "cni/bridge", IPv4: []string{"10.199.0.5"}},
	}
	for i := range 20 {
		a.Events = append(a.Events, Event{Type: "Info", Message: fmt.Sprint("event ", i)})
	}
	if err := s.PutAllocation(ctx, a); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		err := s.UpdateAllocation(ctx, "alloc", func(a *Allocation) error {
			a.TeardownRetries++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutTerminalAllocation includes the retention index and pruning
// (every put past the 50th deletes one).
func BenchmarkPutTerminalAllocation(b *testing.B) {
	ctx := context.Background()
	s, _ := openTest(b, Options{})
	i := 0
	for b.Loop() {
		if err := s.PutAllocation(ctx, &Allocation{ID: fmt.Sprint("a-", i), JobID: "web", Status: AllocComplete}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkGetAttachment(b *testing.B) {
	ctx := context.Background()
	s, _ := openTest(b, Options{})
	if err := s.PutAttachment(ctx, benchAttachment("att")); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.GetAttachment(ctx, "att"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpen measures Open on a store of 1000 attachments and 1000
// allocations, mostly the full consistency check.
func BenchmarkOpen(b *testing.B) {
	ctx := context.Background()
	s, dir := openTest(b, Options{})
	for i := range 1000 {
		if err := s.PutAttachment(ctx, benchAttachment(fmt.Sprint("att-", i))); err != nil {
			b.Fatal(err)
		}
		if err := s.PutAllocation(ctx, &Allocation{ID: fmt.Sprint("alloc-", i), JobID: fmt.Sprint("job-", i%20), Status: AllocRunning}); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := Open(ctx, dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
