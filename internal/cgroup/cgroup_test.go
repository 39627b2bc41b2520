package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupSetFromPath(t *testing.T) {
	h := Hierarchies{Unified: "/cg/unified", V1: []string{"/cg/memory", "/cg/pids"}}
	pure := Hierarchies{Unified: "/cg", PureV2: true}
	tests := []struct {
		name     string
		h        Hierarchies
		path     string
		wantRel  string
		wantFail bool
	}{
		{name: "unified", h: h, path: "/cg/unified/berth/a-web", wantRel: "berth/a-web"},
		{name: "v1", h: h, path: "/cg/memory/berth/a-web", wantRel: "berth/a-web"},
		{name: "pure v2", h: pure, path: "/cg/berth/a-web", wantRel: "berth/a-web"},
		{name: "pure v2 unclean", h: pure, path: "/cg//berth/./a-web/", wantRel: "berth/a-web"},
		{name: "hierarchy root", h: h, path: "/cg/memory", wantFail: true},
		{name: "parent itself", h: h, path: "/cg/memory/berth", wantFail: true},
		{name: "not under parent", h: h, path: "/cg/memory/process_api/x", wantFail: true},
		{name: "nested too deep", h: h, path: "/cg/memory/berth/a/b", wantFail: true},
		{name: "escape", h: h, path: "/cg/memory/berth/../../etc", wantFail: true},
		{name: "elsewhere", h: h, path: "/tmp/berth/x", wantFail: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set, err := FromPath(tc.h, "berth", tc.path)
			if tc.wantFail {
				if err == nil {
					t.Fatalf("accepted %q as %q", tc.path, set.Rel)
				}
				return
			}
			if err != nil || set.Rel != tc.wantRel {
				t.Fatalf("got %v, %v; want rel %q", set, err, tc.wantRel)
			}
		})
	}
}

// SetLimits writes each limit where its controller's file is, v1 and v2
// names, and says when nothing could take one.
func TestSetLimits(t *testing.T) {
	root := t.TempDir()
	v2, mem, cpu := filepath.Join(root, "unified"), filepath.Join(root, "memory"), filepath.Join(root, "cpu")
	for dir, files := range map[string][]string{
		v2:  {"memory.max", "memory.low", "cpu.weight"},
		mem: {"memory.limit_in_bytes", "memory.soft_limit_in_bytes"},
		cpu: {"cpu.shares"},
	} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := &Set{Rel: "berth/x", Unified: v2, V1: []string{mem, cpu}}
	if err := s.SetLimits(Limits{MemoryMax: 300 << 20, MemorySoft: 100 << 20, CPUShares: 500}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		filepath.Join(v2, "memory.max"):                  "314572800",
		filepath.Join(v2, "memory.low"):                  "104857600",
		filepath.Join(v2, "cpu.weight"):                  "19",
		filepath.Join(mem, "memory.limit_in_bytes"):      "314572800",
		filepath.Join(mem, "memory.soft_limit_in_bytes"): "104857600",
		filepath.Join(cpu, "cpu.shares"):                 "500",
	}
	for f, w := range want {
		if b, _ := os.ReadFile(f); string(b) != w {
			t.Errorf("%s = %q, want %q", f, b, w)
		}
	}
	none := &Set{Rel: "berth/y", V1: []string{t.TempDir()}}
	if err := none.SetLimits(Limits{MemoryMax: 1}); err == nil {
		t.Fatal("SetLimits without a memory controller succeeded")
	}
}
