package runner

import (
	"testing"
	"time"

	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/store"
)

// The reschedule decision is Nomad 1.6.5's (NextRescheduleTime,
// NextDelay, RescheduleEligible): the delay by delay function, capped at
// max_delay and back to delay after a long run; attempts counted within
// the interval.
func TestRescheduleDecision(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	batch := jobspec.ReschedulePolicy{Attempts: 1, Interval: 24 * time.Hour, Delay: 5 * time.Second, DelayFunction: "constant"}
	service := jobspec.ReschedulePolicy{Delay: 30 * time.Second, DelayFunction: "exponential", MaxDelay: time.Hour, Unlimited: true}
	fib := jobspec.ReschedulePolicy{Delay: 10 * time.Second, DelayFunction: "fibonacci", MaxDelay: 50 * time.Second, Unlimited: true}
	ev := func(ago time.Duration, delay time.Duration) store.RescheduleEvent {
		return store.RescheduleEvent{RescheduleTime: t0.Add(-ago), PrevAllocID: "p", Delay: delay}
	}
	cases := []struct {
		name    string
		p       jobspec.ReschedulePolicy
		tracker []store.RescheduleEvent
		delay   time.Duration
		ok      bool
	}{
		{"batch first failure", batch, nil, 5 * time.Second, true},
		{"batch attempt used", batch, []store.RescheduleEvent{ev(time.Hour, 5*time.Second)}, 5 * time.Second, false},
		{"batch attempt out of the interval", batch, []store.RescheduleEvent{ev(25*time.Hour, 5*time.Second)}, 5 * time.Second, true},
		{"service first failure", service, nil, 30 * time.Second, true},
		{"service doubles", service, []store.RescheduleEvent{ev(time.Minute, 30*time.Second), ev(10*time.Second, 60*time.Second)}, 120 * time.Second, true},
		{"service capped", service, []store.RescheduleEvent{ev(time.Minute, 40*time.Minute)}, time.Hour, true},
		{"service cap reset after a long run", service, []store.RescheduleEvent{ev(2*time.Hour, 40*time.Minute)}, 30 * time.Second, true},
		{"fibonacci", fib, []store.RescheduleEvent{ev(time.Minute, 10*time.Second), ev(30*time.Second, 20*time.Second)}, 30 * time.Second, true},
		{"fibonacci restarts after the cap", fib, []store.RescheduleEvent{ev(time.Minute, 50*time.Second), ev(30*time.Second, 10*time.Second)}, 10 * time.Second, true},
		{"disabled", jobspec.ReschedulePolicy{Delay: 5 * time.Second, DelayFunction: "constant"}, nil, 5 * time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			al := &store.Allocation{ID: "a", RescheduleTracker: tc.tracker, Tasks: []store.TaskState{{FinishedAt: t0}}}
			at, delay, ok := rescheduleDecision(tc.p, al, t0.Add(time.Second))
			if delay != tc.delay || ok != tc.ok || !at.Equal(t0.Add(tc.delay)) {
				t.Errorf("decision = %s at %s ok %v; want %s ok %v", delay, at, ok, tc.delay, tc.ok)
			}
		})
	}
}

// A replacement's tracker keeps its predecessor's events within the
// interval (the last five when unlimited), then this reschedule.
func TestReplacementTracker(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var old []store.RescheduleEvent
	for i := 7; i >= 1; i-- {
		old = append(old, store.RescheduleEvent{RescheduleTime: now.Add(-time.Duration(i) * time.Hour), PrevAllocID: "p", Delay: time.Second})
	}
	prev := &store.Allocation{ID: "prev", RescheduleTracker: old}
	limited := replacementTracker(jobspec.ReschedulePolicy{Attempts: 5, Interval: 150 * time.Minute}, prev, now, 2*time.Second)
	unlimited := replacementTracker(jobspec.ReschedulePolicy{Unlimited: true}, prev, now, 2*time.Second)
	for _, tc := range []struct {
		name string
		got  []store.RescheduleEvent
		want int
	}{{"within the interval", limited, 3}, {"last five", unlimited, 6}} {
		last := tc.got[len(tc.got)-1]
		if len(tc.got) != tc.want || last.PrevAllocID != "prev" || last.Delay != 2*time.Second || !last.RescheduleTime.Equal(now) {
			t.Errorf("%s: %d events, last %+v; want %d ending with this reschedule", tc.name, len(tc.got), last, tc.want)
		}
	}
}
