package podman

import (
	"context"
	"os/exec"
	"sort"
	"testing"
	"time"
)

// BenchmarkRunExit0 is a whole task life: create+start+wait+destroy of
// `/bin/sh -c "exit 0"` in a fresh network namespace (made and deleted
// outside the timer). Besides ns/op it reports the median of each phase and
// of exit-to-destroyed: from the exit time podman recorded to Destroy
// returning, i.e. when berth may tear the namespace down.
func BenchmarkRunExit0(b *testing.B) {
	requirePodman(b)
	d := newDriver(b, b.TempDir())
	ctx := context.Background()
	var start, wait, destroyD, exitToGone []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		task := testTask(b, map[string]any{"image": testImage, "command": "/bin/sh", "args": []any{"-c", "exit 0"}})
		b.StartTimer()

		t0 := time.Now()
		h, err := d.Start(ctx, task)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		res, err := h.Wait(ctx)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("Wait = %+v, %v", res, err)
		}
		t2 := time.Now()
		if err := h.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()

		b.StopTimer()
		start = append(start, t1.Sub(t0))
		wait = append(wait, t2.Sub(t1))
		destroyD = append(destroyD, t3.Sub(t2))
		if !res.FinishedAt.IsZero() {
			exitToGone = append(exitToGone, t3.Sub(res.FinishedAt))
		}
		// Delete this iteration's namespace now rather than at the end.
		_ = exec.Command("ip", "netns", "del", task.NetnsPath[len("/run/netns/"):]).Run()
		b.StartTimer()
	}
	b.StopTimer()
	report := func(name string, l []time.Duration) {
		if len(l) == 0 {
			return
		}
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		b.ReportMetric(float64(l[len(l)/2].Microseconds())/1000, name+"-p50-ms")
	}
	report("start", start)
	report("wait", wait)
	report("destroy", destroyD)
	report("exit-to-destroyed", exitToGone)
	if testing.Verbose() {
		b.Logf("wait: %v", wait)
	}
}
