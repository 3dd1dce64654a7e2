package store

import (
	"sync"

	"github.com/kithmesh/kith/protocol"
)

// Change is one committed event of some delegation, as Watch delivers it.
type Change struct {
	Role  Role
	ID    protocol.DelegationID
	Event Event // Data is left out: watchers want to know, not to replay
}

// watchers is the set of Watch channels of one Store.
type watchers struct {
	mu   sync.Mutex
	subs map[chan Change]struct{}
}

// Watch delivers every delegation event committed from now on, under
// either role. The channel is buffered; a watcher that falls behind misses
// changes (it can read the log by sequence number). cancel stops delivery.
func (s *Store) Watch() (<-chan Change, func()) {
	ch := make(chan Change, 256)
	w := &s.watch
	w.mu.Lock()
	if w.subs == nil {
		w.subs = make(map[chan Change]struct{})
	}
	w.subs[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.subs, ch)
		w.mu.Unlock()
	}
}

// notify tells the watchers about committed events, without blocking.
func (s *Store) notify(role Role, id protocol.DelegationID, evs ...Event) {
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		for _, ev := range evs {
			ev.Data = nil
			select {
			case ch <- Change{Role: role, ID: id, Event: ev}:
			default:
			}
		}
	}
}
