package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/store"
)

func testAlloc(id string, status store.AllocStatus) *store.Allocation {
	return &store.Allocation{ID: id, Status: status, Tasks: []store.TaskState{{Name: "t"}},
		Network: &store.NetworkStatus{Mode: "cni/x", IPv4: []string{"10.199.1.5/24"},
			Ports: []store.PortMapping{{Label: "http", HostIP: "127.0.0.1", HostPort: 23456, To: 80}}},
		TimingsMS: map[string]float64{}}
}

// TestRunOutput: on a terminal a status line is redrawn under the
// allocation lines; elsewhere plain lines; --json one object per line.
func TestRunOutput(t *testing.T) {
	drive := func(o *runOutput) {
		opts := o.options(0, 0)
		opts.OnSchedule(1, time.Now().Add(3*time.Second))
		opts.OnStart(testAlloc("a1", store.AllocRunning))
		opts.OnStart(testAlloc("a2", store.AllocRunning))
		opts.OnAlloc(testAlloc("a1", store.AllocComplete))
		opts.OnAlloc(testAlloc("a2", store.AllocFailed))
		opts.OnSchedule(2, time.Time{})
	}
	t.Run("terminal", func(t *testing.T) {
		var b bytes.Buffer
		o := &runOutput{w: &b, live: true, start: time.Now(), started: map[string]bool{}}
		drive(o)
		out := b.String()
		if !strings.Contains(out, "started   10.199.1.5/24  http 127.0.0.1:23456 -> 80") {
			t.Errorf("no start line with address and port:\n%q", out)
		}
		last := out[strings.LastIndex(out, "\r\033[K")+len("\r\033[K"):]
		if !strings.HasPrefix(last, "launches 2 · running 0 · complete 1 · failed 1") {
			t.Errorf("final status line %q", last)
		}
		if !strings.Contains(out, "running 2 · complete 0") || !strings.Contains(out, "next launch in 3s") {
			t.Errorf("status line never showed two running and the next launch:\n%q", out)
		}
	})
	t.Run("not a terminal", func(t *testing.T) {
		var b bytes.Buffer
		o := newRunOutput(&b, false)
		drive(o)
		o.close()
		if strings.Contains(b.String(), "\033[") || strings.Contains(b.String(), "launches") {
			t.Errorf("terminal codes or a status line in plain output:\n%q", b.String())
		}
		if strings.Count(b.String(), " started ") != 2 || strings.Count(b.String(), " complete ") != 1 || strings.Count(b.String(), " failed ") != 1 {
			t.Errorf("plain output:\n%s", b.String())
		}
	})
	t.Run("json", func(t *testing.T) {
		var b bytes.Buffer
		o := newRunOutput(&b, true)
		drive(o)
		o.summary(nil, &runner.Summary{Job: "j", ByStatus: map[store.AllocStatus]int{store.AllocComplete: 1}})
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) != 5 {
			t.Fatalf("%d JSON lines, want 5:\n%s", len(lines), b.String())
		}
		for i, l := range lines {
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("line %d is not one JSON object: %v\n%s", i, err, l)
			}
			want := []string{"started", "started", "finished", "finished", "summary"}[i]
			if v["event"] != want {
				t.Errorf("line %d event %v, want %s", i, v["event"], want)
			}
		}
	})
}
