package cleanup

import (
	"context"
	"errors"
	"testing"
	"time"
)

type key struct{}

func TestContext(t *testing.T) {
	tests := []struct {
		name   string
		parent func() (context.Context, context.CancelFunc)
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
		{"deadline passed", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}},
		{"live", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancelParent := tc.parent()
			defer cancelParent()
			parent = context.WithValue(parent, key{}, "v")
			before := time.Now()
			ctx, cancel := Context(parent, time.Hour)
			defer cancel()
			if err := ctx.Err(); err != nil {
				t.Fatalf("cleanup context ended with its parent: %v", err)
			}
			if ctx.Value(key{}) != "v" {
				t.Error("cleanup context lost the parent's values")
			}
			dl, ok := ctx.Deadline()
			if !ok || dl.Before(before.Add(time.Hour)) || dl.After(time.Now().Add(time.Hour)) {
				t.Errorf("deadline %v (set %v), want one hour from the call", dl, ok)
			}
			cancel()
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("after cancel: %v", ctx.Err())
			}
		})
	}
}

func TestContextEnds(t *testing.T) {
	ctx, cancel := Context(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", ctx.Err())
	}
}
