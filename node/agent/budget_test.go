package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/job/jobspec/jobspectest"
	"github.com/berth/berth/node"
)

// startPlanAgent runs an agent for tests that only plan jobs: no CNI
// network (none is needed to refuse a job file), its own dirs.
func startPlanAgent(t *testing.T) (*Agent, *api.Client) {
	t.Helper()
	testenv.RequireRoot(t)
	dir, err := os.MkdirTemp("", "bteb")
	testenv.Must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := DefaultConfig()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.LockDir = filepath.Join(dir, "lock")
	cfg.CNIConfigDir = filepath.Join(dir, "cni")
	testenv.Must(t, os.MkdirAll(cfg.CNIConfigDir, 0o755))
	cfg.CNIPath = []string{testenv.ReferencePlugins}
	cfg.GCMode = GCRecords
	cfg.GCInterval = "0"
	cfg.DrainOnShutdown = true
	cfg.Bridge = &node.Bridge{Network: "bteb-br-" + testenv.RandSuffix(6), Iface: "bteb" + testenv.RandSuffix(6), Subnet: "10.199.75.0/24"}
	cfg.API = &APIConfig{Socket: filepath.Join(dir, "b.sock")}
	cfg.Client.NetworkInterface = "lo"
	e := &testEnv{cfg: cfg, dir: dir}
	return e.startAgent(t)
}

// TestEvalBudgetAgent: POST /v1/jobs/plan with each evaluation bomb of
// issue 18 is answered 400 with a positioned diagnostic, within 2 s and
// 64 MiB of heap growth, and the agent keeps serving. Before, the
// setproduct one killed the agent ("fatal error: runtime: out of memory").
func TestEvalBudgetAgent(t *testing.T) {
	_, c := startPlanAgent(t)
	// One baseline, taken once the agent serves and before any bomb: each
	// bomb's growth is measured from it, so that what one bomb keeps
	// counts against every bomb after it (HeapSys does not shrink).
	var base runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	for _, tt := range jobspectest.EvalBombs {
		if tt.Name == "invalid UTF-8" {
			// JSON carries no invalid UTF-8 (it arrives as U+FFFD): the
			// CLI refuses such a file before sending it (CheckSource).
			continue
		}
		t.Run(tt.Name, func(t *testing.T) {
			body, err := json.Marshal(api.JobSubmitRequest{JobHCL: jobspectest.WithGroup(tt.Src), Filename: "bomb.hcl"})
			testenv.Must(t, err)
			var after runtime.MemStats
			start := time.Now()
			code, resp := post(t, c, "/v1/jobs/plan", bytes.NewReader(body))
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			var er api.ErrorResponse
			testenv.Must(t, json.Unmarshal([]byte(resp), &er))
			if strings.Contains(tt.Src, "file") && strings.Contains(er.Error, "filesystem functions are disabled") {
				tt.Want = "filesystem functions are disabled" // the API's jobs read no file
			}
			if code != http.StatusBadRequest || !tt.Matches("bomb.hcl", er.Error) || len(er.Diagnostics) == 0 {
				t.Errorf("%d %s; want 400 with a diagnostic at bomb.hcl:%s mentioning %q", code, resp, tt.Pos, tt.Want)
			}
			if took > 2*time.Second {
				t.Errorf("answered in %s, want < 2s", took)
			}
			if extra := int64(after.HeapSys) - int64(base.HeapSys); extra > 64<<20 {
				t.Errorf("the agent's heap is %d MiB above its size before the bombs, want < 64 MiB", extra>>20)
			}
			t.Logf("%s, heap %+d MiB over the baseline: %s", took.Round(time.Millisecond), (int64(after.HeapSys)-int64(base.HeapSys))>>20, firstLine(er.Error))
		})
	}
	ctx := testenv.Context(t, time.Minute)
	if h, err := c.Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("after the bombs: health %+v, %v", h, err)
	}
	ok := jobspectest.WithGroup("job \"bteb-fine\" {\n  meta { x = length(range(10)) }\n}\n")
	body, err := json.Marshal(api.JobSubmitRequest{JobHCL: ok, Filename: "fine.hcl"})
	testenv.Must(t, err)
	if code, resp := post(t, c, "/v1/jobs/plan", bytes.NewReader(body)); code != http.StatusOK {
		t.Errorf("a valid job after the bombs: %d %s", code, resp)
	}
	// Nothing a bomb built is kept once the requests are answered.
	var end runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&end)
	if kept := int64(end.HeapInuse) - int64(base.HeapInuse); kept > 64<<20 {
		t.Errorf("after the bombs the agent holds %d MiB more heap than before them", kept>>20)
	}
}

// TestEvalBudgetAgentClientLeft: the plan and submit handlers evaluate
// with the request's context, so a client that left stops the
// evaluation (yamldecode bombs grew the agent by 160 MB per request
// after the client was gone).
func TestEvalBudgetAgentClientLeft(t *testing.T) {
	a, _ := startPlanAgent(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := api.JobSubmitRequest{JobHCL: jobspectest.WithGroup("job \"bteb-left\" {\n  meta { x = upper(\"a\") }\n}\n"), Filename: "left.hcl"}
	for name, call := range map[string]func() error{
		"plan":   func() error { _, err := a.plan(ctx, req); return err },
		"submit": func() error { _, err := a.submit(ctx, req); return err },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "left.hcl:2:14: evaluation limit reached; evaluation stopped: context canceled") {
			t.Errorf("%s with a cancelled context: %v", name, err)
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}
