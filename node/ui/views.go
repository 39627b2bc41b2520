package ui

import (
	"fmt"
	"html/template"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berth/berth/api"
)

// What the pages' templates render: the API's types, plus what is worked
// out of them here rather than in a template.

type overviewView struct {
	Jobs        []api.JobStub
	Allocs      []allocRow
	AllocMore   int // allocations not listed
	AllocTotal  int
	Namespaces  int // in the agent's netns dir, with pending teardowns
	Held        int // namespaces something holds
	Pending     []api.NetnsEntry
	GC          []GCRun
	LastGC      *api.GCReport
	JobCounts   []count
	AllocCounts []count
	LatencyPlot [2]*plot // wide, narrow
	RatePlot    [2]*plot
	Hour        hourTotal
}

// namespacesView lists berth's namespaces first; the host's others (often
// most of them) are folded behind their count.
type namespacesView struct {
	Berth   []api.NetnsEntry
	Others  []api.NetnsEntry
	Pending []api.NetnsEntry
}

type jobView struct {
	Status *api.JobStatus
	Allocs []allocRow
}

type allocView struct {
	Alloc *api.Allocation
	Row   allocRow
	Steps []step
	Logs  []taskLogs
}

type taskLogs struct {
	Task    string
	Streams []logStream
}

type logStream struct {
	Name      string
	Text      string
	Truncated bool
	Missing   bool // never written, or retired with its directory
	Err       string
}

// count is one status and how many have it.
type count struct {
	Status string
	N      int
}

// counts lists by in the given order, then any other status by name.
func counts(by map[string]int, order ...string) []count {
	var out []count
	seen := map[string]bool{}
	for _, s := range order {
		out = append(out, count{s, by[s]})
		seen[s] = true
	}
	var rest []string
	for s := range by {
		if !seen[s] {
			rest = append(rest, s)
		}
	}
	sort.Strings(rest)
	for _, s := range rest {
		out = append(out, count{s, by[s]})
	}
	return out
}

func pendingTeardowns(nss []api.NetnsEntry) []api.NetnsEntry {
	var out []api.NetnsEntry
	for _, n := range nss {
		if n.Phase == "tearing-down" {
			out = append(out, n)
		}
	}
	return out
}

// hourTotal adds up the last hour.
type hourTotal struct {
	Ended, Failed        int
	SetupP50, SetupMax   float64 // of the minutes' medians and maxima
	TeardownP50, TearMax float64
}

func hourTotals(ms []Minute) hourTotal {
	var h hourTotal
	var setups, tears []float64
	for _, m := range ms {
		h.Ended += m.Ended()
		h.Failed += m.Failed + m.Lost
		if m.Setup.N > 0 {
			setups = append(setups, m.Setup.P50)
			h.SetupMax = math.Max(h.SetupMax, m.Setup.Max)
		}
		if m.Teardown.N > 0 {
			tears = append(tears, m.Teardown.P50)
			h.TearMax = math.Max(h.TearMax, m.Teardown.Max)
		}
	}
	h.SetupP50, h.TeardownP50 = median(setups), median(tears)
	return h
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

// allocRow is one allocation in a table.
type allocRow struct {
	ID, JobID, Group  string
	Status, Desc      string
	Address           string
	Ports             []string // "http 10.0.0.1:28080→8080"
	Network           string
	Setup, Teardown   float64 // ms
	Task              float64 // ms
	Total             float64 // ms
	Created, Modified time.Time
	Tasks             []api.TaskState
	Bar               *phaseBar
}

func newAllocRow(a *api.Allocation) allocRow {
	r := allocRow{
		ID: a.ID, JobID: a.JobID, Group: a.Group, Status: a.Status, Desc: a.StatusDesc,
		Created: a.CreatedAt, Modified: a.ModifiedAt, Tasks: a.Tasks,
		Setup: SetupMS(a.Timings), Teardown: TeardownMS(a.Timings),
	}
	if t := a.Timings; t != nil {
		r.Task, r.Total = t.Task, t.Total
	}
	if n := a.Network; n != nil {
		r.Network = n.Network
		if r.Network == "" {
			r.Network = n.Mode
		}
		r.Address = strings.Join(append(append([]string{}, n.IPv4...), n.IPv6...), ", ")
		for _, p := range n.Ports {
			r.Ports = append(r.Ports, portText(p))
		}
	}
	r.Bar = newPhaseBar(a.Timings)
	return r
}

func portText(p api.PortMapping) string {
	host := strconv.Itoa(p.HostPort)
	if p.HostIP != "" {
		host = net.JoinHostPort(p.HostIP, host)
	}
	s := p.Label + " " + host
	if p.To > 0 && p.To != p.HostPort {
		s += "→" + strconv.Itoa(p.To)
	}
	return s
}

// phases are the steps of an allocation in the order they happen, with
// the class that colours them.
var phases = []struct{ name, label, class string }{
	{"netns", "netns", "ph-setup"},
	{"add", "CNI ADD", "ph-setup"},
	{"berth", "berth", "ph-berth"},
	{"task_start", "task start", "ph-task"},
	{"task", "task", "ph-task"},
	{"driver_cleanup", "driver cleanup", "ph-task"},
	{"del", "CNI DEL", "ph-teardown"},
	{"remove", "netns remove", "ph-teardown"},
}

func phaseMS(t *api.Timings, name string) float64 {
	switch name {
	case "netns":
		return t.Netns
	case "add":
		return t.Add
	case "berth":
		return t.Berth
	case "task_start":
		return t.TaskStart
	case "task":
		return t.Task
	case "driver_cleanup":
		return t.DriverCleanup
	case "del":
		return t.Del
	case "remove":
		return t.Remove
	}
	return 0
}

// step is one row of an allocation's timing table.
type step struct {
	Label string
	Class string
	MS    float64
	Width float64 // of the bar, in percent of the longest step
}

func timingSteps(t *api.Timings) []step {
	if t == nil {
		return nil
	}
	var out []step
	longest := 0.0
	for _, p := range phases {
		if ms := phaseMS(t, p.name); ms > 0 {
			out = append(out, step{Label: p.label, Class: p.class, MS: ms})
			longest = math.Max(longest, ms)
		}
	}
	for i := range out {
		out[i].Width = math.Max(0.5, 100*out[i].MS/longest)
	}
	if t.ExitToNetnsGone > 0 {
		out = append(out, step{Label: "exit → netns gone", Class: "ph-total", MS: t.ExitToNetnsGone, Width: math.Max(0.5, 100*t.ExitToNetnsGone/math.Max(longest, t.ExitToNetnsGone))})
	}
	return out
}

// phaseBar is a row's timings as one stacked bar. The task usually takes
// nearly all of an allocation's time, which would hide the network's
// steps: each segment's width is proportional to the square root of its
// duration, and the tooltip has the numbers.
type phaseBar struct {
	Segs  []barSeg
	Title string
}

type barSeg struct {
	X, W  float64 // in a 0..100 viewBox
	Class string
}

func newPhaseBar(t *api.Timings) *phaseBar {
	if t == nil {
		return nil
	}
	var weights []float64
	var segs []barSeg
	var parts []string
	total := 0.0
	for _, p := range phases {
		ms := phaseMS(t, p.name)
		if ms <= 0 {
			continue
		}
		w := math.Sqrt(ms)
		weights = append(weights, w)
		total += w
		segs = append(segs, barSeg{Class: p.class})
		parts = append(parts, p.label+" "+fmtMS(ms))
	}
	if total == 0 {
		return nil
	}
	x := 0.0
	for i := range segs {
		segs[i].X = x
		segs[i].W = 100 * weights[i] / total
		x += segs[i].W
	}
	return &phaseBar{Segs: segs, Title: strings.Join(parts, " · ")}
}

// fmtMS prints a duration measured in milliseconds at a precision that
// suits it.
func fmtMS(ms float64) string {
	switch {
	case ms <= 0:
		return "–"
	case ms < 10:
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	case ms < 1000:
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	case ms < 60_000:
		return strconv.FormatFloat(ms/1000, 'f', 2, 64) + " s"
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

// relTime says how far t is from now in a few characters.
func relTime(t, now time.Time) string {
	if t.IsZero() {
		return "–"
	}
	d := now.Sub(t)
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, ""
	}
	var s string
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if suffix == "" {
		return "in " + s
	}
	return s + suffix
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// statusClass is the CSS class that colours a status.
func statusClass(s string) string {
	switch s {
	case api.AllocRunning, "ready": // api.JobRunning is "running" too
		return "st-run"
	case api.AllocComplete, "passing":
		return "st-ok"
	case api.AllocFailed, api.AllocLost, "tearing-down", "critical":
		return "st-bad"
	case api.AllocPending, api.JobStopping, "intent", "warning":
		return "st-wait"
	}
	return "st-other"
}

var funcs = template.FuncMap{
	"ms":    fmtMS,
	"short": shortID,
	"class": statusClass,
	"join":  strings.Join,
	"ago":   relTime,
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.Local().Format("15:04:05")
	},
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Local().Format(time.RFC3339)
	},
	"holder": func(h api.Holder) string { return h.String() },
	"deref":  func(t *time.Time) time.Time { return derefTime(t) },
	"exitText": func(t api.TaskState) string {
		if s := t.Exit(); s != "" {
			return s
		}
		return "–"
	},
	"taskState": func(t api.TaskState) string {
		if t.State == "dead" && t.Failed {
			return "failed"
		}
		return t.State
	},
	"uptime": func(start, now time.Time) string {
		return now.Sub(start).Round(time.Second).String()
	},
	"pct":   func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
	"minus": func(d, v float64) float64 { return v - d },
	"half":  func(v float64) float64 { return v / 2 },
	"refreshSeconds": func(ms int64) int64 {
		return max(1, (ms+999)/1000)
	},
	"rows": func(r []allocRow, now time.Time) allocRows { return allocRows{Rows: r, Now: now} },
}

// allocRows is what the allocTable template renders.
type allocRows struct {
	Rows []allocRow
	Now  time.Time
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
