package store

import (
	"slices"
	"sync"
)

// keyLocks serialises writers of the same record inside this process.
//
// Badger's optimistic transactions alone are correct but, under contention,
// wasteful: 32 goroutines appending to one event log would each read the
// sequence counter, one would commit and 31 would retry, over and over. A
// lock per record key makes them queue instead, while writers of different
// records still commit concurrently and so still share badger's group
// commit. A fixed array of striped mutexes would be smaller but would make
// unrelated delegations that hash alike wait for each other's sync.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int // holders and waiters; the entry is dropped at zero
}

// lock acquires the locks for keys, in sorted order so that two callers
// needing overlapping sets can never deadlock, and returns the function that
// releases them.
func (k *keyLocks) lock(keys ...string) (unlock func()) {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)

	held := make([]*keyLock, len(keys))
	for i, key := range keys {
		k.mu.Lock()
		if k.m == nil {
			k.m = make(map[string]*keyLock)
		}
		l := k.m[key]
		if l == nil {
			l = &keyLock{}
			k.m[key] = l
		}
		l.refs++
		k.mu.Unlock()

		l.mu.Lock()
		held[i] = l
	}
	return func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i].mu.Unlock()
			k.mu.Lock()
			held[i].refs--
			if held[i].refs == 0 {
				delete(k.m, keys[i])
			}
			k.mu.Unlock()
		}
	}
}
