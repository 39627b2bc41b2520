package runner

import (
	"math"
	"testing"
)

func TestQuantiles(t *testing.T) {
	var q quantiles
	if q.quantile(50) != 0 {
		t.Error("empty quantile not 0")
	}
	for i := 1; i <= 1000; i++ {
		q.add(float64(i))
	}
	for _, tc := range []struct{ p, want float64 }{{50, 500}, {99, 990}, {100, 1000}, {1, 10}} {
		got := q.quantile(tc.p)
		if math.Abs(got-tc.want)/tc.want > 0.011 {
			t.Errorf("p%.0f = %.1f, want %.1f within 1%%", tc.p, got, tc.want)
		}
	}
	if len(q.counts) > 700 {
		t.Errorf("%d buckets for 1..1000 ms: memory not bounded as intended", len(q.counts))
	}
}
