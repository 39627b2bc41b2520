package gc_test

import (
	"testing"
	"time"

	"github.com/berth/berth/internal/testenv"
	"github.com/berth/berth/node/gc"
)

// With Options.Progress a real run plans first and reports its position
// in the plan before each item it acts on: done counts up to planned, the
// last report has done = planned = the rows acted on.
func TestReportGCProgress(t *testing.T) {
	e := newEnv(t, full("10.199.238.0/24"))
	id := e.id()
	e.mustBerth(t, "net", "up", id, "--network", e.net.Name)
	e.mustBerth(t, "net", "down", id)
	st := e.openStore(t)
	o := e.options(st, e.manager(st, 0, 0))
	var ps []gc.Progress
	o.Progress = func(p gc.Progress) { ps = append(ps, p) }
	rep, err := gc.Run(testenv.Context(t, time.Minute), o)
	testenv.Must(t, err)
	acted := rep.Counts.Found + rep.Counts.GCSent
	if acted == 0 || len(ps) != acted+1 {
		t.Fatalf("%d progress reports for %d rows acted on: %+v", len(ps), acted, ps)
	}
	for i, p := range ps[:acted] {
		if p.Done != i || p.Planned != acted || p.Current.Kind == "" {
			t.Errorf("report %d: %+v, want %d of %d with the current item", i, p, i, acted)
		}
	}
	if last := ps[acted]; last.Done != acted || last.Planned != acted || last.Current.Kind != "" {
		t.Errorf("last report %+v, want %d of %d", last, acted, acted)
	}
}
