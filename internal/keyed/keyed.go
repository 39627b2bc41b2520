// Package keyed serialises work per key (an attachment ID, a job ID)
// without a lock across keys: work on different keys runs in parallel.
package keyed

import "sync"

// Mutex is a set of mutexes, one per key in use. The zero value is ready.
type Mutex struct {
	mu sync.Mutex
	m  map[string]*entry
}

type entry struct {
	mu   sync.Mutex
	refs int
}

// Lock locks key and returns the function that unlocks it. Entries are
// dropped when no one holds or waits for them, so the set does not grow
// with the number of keys ever used.
func (k *Mutex) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*entry{}
	}
	e := k.m[key]
	if e == nil {
		e = &entry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

// size is how many keys are held or waited for: none once every Lock is
// unlocked (the map must not grow with keys seen).
func (k *Mutex) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}
