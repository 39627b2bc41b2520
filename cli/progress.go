package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth/berth/job/runner"
	"github.com/berth/berth/node/agent"
	"github.com/berth/berth/store"
)

// runOutput is what `berth run` prints while a job runs. On a terminal a
// status line at the bottom (launches, running, complete, failed,
// allocations per minute, the next periodic launch) is redrawn in place,
// with each allocation's lines printed above it; elsewhere the same lines
// are printed plainly; with --json each start and end is one JSON object
// per line, and the summary is the last.
type runOutput struct {
	w     io.Writer
	json  bool
	live  bool
	start time.Time

	mu                sync.Mutex
	launches, running int
	complete, failed  int
	next              time.Time
	ended             []time.Time // ends in the last minute
	started           map[string]bool
	// phases are the allocations' phases in progress (runner.Phase*).
	phases map[string]string
	// line is the status line, with every other line printed above it.
	line   *liveLine
	stop   chan struct{}
	done   chan struct{}
	header bool
	svc    *serviceWatch
}

// isTerminal says whether w is a terminal (TCGETS answers).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func newRunOutput(w io.Writer, asJSON bool) *runOutput {
	o := &runOutput{w: w, json: asJSON, live: !asJSON && isTerminal(w), start: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{}), started: map[string]bool{}, phases: map[string]string{}}
	if o.live {
		go o.tick()
	} else {
		close(o.done)
	}
	return o
}

// tick redraws the status line twice a second: the rate and the time to
// the next launch change without any event.
func (o *runOutput) tick() {
	defer close(o.done)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
			o.mu.Lock()
			o.draw()
			o.mu.Unlock()
		}
	}
}

// term is the status line (live output only).
func (o *runOutput) term() *liveLine {
	if o.line == nil {
		o.line = &liveLine{term: o.w}
	}
	return o.line
}

// logTo is w (the log's output) printed above the status line, when there
// is one.
func (o *runOutput) logTo(w io.Writer) io.Writer {
	if !o.live {
		return w
	}
	return o.term().writer(w)
}

// lines prints above the status line. The caller holds mu.
func (o *runOutput) lines(ls ...string) {
	var b strings.Builder
	if !o.json && !o.header {
		o.header = true
		fmt.Fprintf(&b, "%-36s  %-8s  %-6s  %9s  %11s\n", "ALLOC", "STATUS", "EXIT", "SETUP_MS", "TEARDOWN_MS")
	}
	for _, l := range ls {
		b.WriteString(l + "\n")
	}
	if o.live {
		_, _ = o.term().above(o.w, []byte(b.String()))
	} else {
		io.WriteString(o.w, b.String())
	}
	o.draw()
}

// phaseText names the phases allocations are in, e.g. "setting up 3
// networks · starting 1".
func (o *runOutput) phaseText() string {
	n := map[string]int{}
	for _, p := range o.phases {
		n[p]++
	}
	var parts []string
	for _, p := range []struct{ phase, one, many string }{
		{runner.PhaseNetwork, "setting up 1 network", "setting up %d networks"},
		{runner.PhaseArtifacts, "fetching artifacts of 1 allocation", "fetching artifacts of %d allocations"},
		{runner.PhaseStarting, "starting 1", "starting %d"},
		{runner.PhaseTeardown, "tearing down 1", "tearing down %d"},
	} {
		switch c := n[p.phase]; {
		case c == 1:
			parts = append(parts, p.one)
		case c > 1:
			parts = append(parts, fmt.Sprintf(p.many, c))
		}
	}
	return strings.Join(parts, " · ")
}

// draw writes the status line. The caller holds mu.
func (o *runOutput) draw() {
	if !o.live {
		return
	}
	cutoff := time.Now().Add(-time.Minute)
	for len(o.ended) > 0 && o.ended[0].Before(cutoff) {
		o.ended = o.ended[1:]
	}
	rate := float64(len(o.ended))
	if el := time.Since(o.start); el < time.Minute && el > time.Second {
		rate = float64(len(o.ended)) / el.Minutes()
	}
	s := fmt.Sprintf("launches %d · running %d · complete %d · failed %d · %.0f allocs/min", o.launches, o.running, o.complete, o.failed, rate)
	if !o.next.IsZero() {
		s += " · next launch in " + time.Until(o.next).Round(time.Second).String()
	}
	if p := o.phaseText(); p != "" {
		s = p + " · " + s
	}
	o.term().set(s)
}

func (o *runOutput) jsonLine(v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(o.w, string(b))
}

func (o *runOutput) options(maxRuns int, forDur time.Duration) runner.RunOptions {
	return runner.RunOptions{
		MaxRuns: maxRuns, For: forDur,
		OnPhase: func(id, phase string) {
			o.mu.Lock()
			defer o.mu.Unlock()
			if phase == runner.PhaseDone || phase == runner.PhaseRunning {
				delete(o.phases, id)
			} else {
				o.phases[id] = phase
			}
			o.draw()
		},
		OnSchedule: func(launches int, next time.Time) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.launches, o.next = launches, next
			o.draw()
		},
		OnStart: func(a *store.Allocation) {
			o.mu.Lock()
			defer o.mu.Unlock()
			o.started[a.ID] = true
			o.running++
			if o.json {
				o.jsonLine(map[string]any{"event": "started", "allocation": o.startedJSON(a)})
				return
			}
			o.lines(startLine(a) + o.startServices(a.ID))
		},
		OnAlloc: func(a *store.Allocation) {
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.started[a.ID] {
				delete(o.started, a.ID)
				o.running--
			}
			if a.Status == store.AllocComplete {
				o.complete++
			} else {
				o.failed++
			}
			if o.live {
				o.ended = append(o.ended, time.Now())
			}
			if o.json {
				o.jsonLine(map[string]any{"event": "finished", "allocation": agent.WireAllocation(a)})
				return
			}
			ls := []string{fmt.Sprintf("%-36s  %-8s  %-6s  %9.1f  %11.1f", a.ID, a.Status, exitCodes(a), a.TimingsMS["netns"]+a.TimingsMS["add"], a.TimingsMS["del"]+a.TimingsMS["remove"])}
			if a.StatusDesc != "" && a.Status != store.AllocComplete {
				ls = append(ls, "    "+a.StatusDesc)
			}
			o.lines(ls...)
		},
	}
}

// close stops the status line, leaving it on screen as the last word
// before the summary.
func (o *runOutput) close() {
	o.stopServices()
	if o.live {
		close(o.stop)
		<-o.done
		o.mu.Lock()
		o.next = time.Time{}
		o.draw()
		o.term().clear(true)
		o.mu.Unlock()
	}
}

// summary prints the run's summary: a JSON line, or the text block.
func (o *runOutput) summary(g *Globals, sum *runner.Summary) {
	if o.json {
		o.jsonLine(map[string]any{"event": "summary", "summary": agent.WireSummary(sum)})
		return
	}
	if !o.header {
		o.lines()
	}
	printSummary(g, agent.WireSummary(sum))
}
