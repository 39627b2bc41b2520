package keyed

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestSerialisesPerKey(t *testing.T) {
	var k Mutex
	var inA atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := k.Lock("a")
			if inA.Add(1) != 1 {
				t.Error("two holders of key a")
			}
			time.Sleep(time.Millisecond)
			inA.Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if k.size() != 0 {
		t.Errorf("%d entries left", k.size())
	}
}

func TestKeysIndependent(t *testing.T) {
	var k Mutex
	unlockA := k.Lock("a")
	done := make(chan struct{})
	go func() { k.Lock("b")(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("key b waited for key a")
	}
	unlockA()
}
