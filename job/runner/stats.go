package runner

import "math"

// quantiles estimates percentiles of millisecond durations in constant
// memory: counts in log-spaced buckets 1% wide, so a job that runs for
// months keeps its summary without keeping its samples.
type quantiles struct {
	counts map[int]int64
	n      int64
}

const bucketGrowth = 1.01

func bucketOf(ms float64) int {
	if ms < 0.001 {
		ms = 0.001
	}
	return int(math.Floor(math.Log(ms) / math.Log(bucketGrowth)))
}

func (q *quantiles) add(ms float64) {
	if q.counts == nil {
		q.counts = map[int]int64{}
	}
	q.counts[bucketOf(ms)]++
	q.n++
}

// quantile returns the upper edge of the bucket holding the p-th
// percentile (nearest rank), within 1% of the true value; 0 when empty.
func (q *quantiles) quantile(p float64) float64 {
	if q.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(p / 100 * float64(q.n)))
	if rank < 1 {
		rank = 1
	}
	lo, hi := math.MaxInt, math.MinInt
	for b := range q.counts {
		lo, hi = min(lo, b), max(hi, b)
	}
	var seen int64
	for b := lo; b <= hi; b++ {
		seen += q.counts[b]
		if seen >= rank {
			return math.Pow(bucketGrowth, float64(b+1))
		}
	}
	return math.Pow(bucketGrowth, float64(hi+1))
}
