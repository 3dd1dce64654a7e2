package delegation

import (
	"context"
	"sync"
	"sync/atomic"
)

// maxIdleWorkers is how many goroutines wait for the engine's next piece
// of work once theirs is done. It covers the requester's and the
// provider's goroutines of 64 delegations in flight; a burst beyond it
// starts goroutines that end with their work.
const maxIdleWorkers = 128

// workers runs the engine's goroutines (a delegation followed, an inbound
// stream served, a task run) on goroutines that outlive them. A fresh
// goroutine starts on a small stack and grows it, copying it each time,
// through the session handshake, the codecs and the store: a profile at 64
// delegations in flight found 5% of the engine's CPU in stack copies. A
// worker that served one delegation has the stack the next one needs.
type workers struct {
	// hand is unbuffered: a send succeeds only into a worker waiting
	// for work, never into a queue.
	hand chan func()
	idle atomic.Int32
	// spawned counts the goroutines started, for tests.
	spawned atomic.Int32
}

func newWorkers() *workers { return &workers{hand: make(chan func())} }

// run runs f on an idle worker, or on a new one when none waits. wg counts
// the workers: a worker ends once ctx has ended and its work is done.
func (w *workers) run(ctx context.Context, wg *sync.WaitGroup, f func()) {
	select {
	case w.hand <- f:
		return
	default:
	}
	wg.Add(1)
	w.spawned.Add(1)
	go w.loop(ctx.Done(), wg, f)
}

func (w *workers) loop(done <-chan struct{}, wg *sync.WaitGroup, f func()) {
	defer wg.Done()
	for {
		f()
		f = nil // let f's captures go while this worker waits
		if w.idle.Add(1) > maxIdleWorkers {
			w.idle.Add(-1)
			return
		}
		select {
		case f = <-w.hand:
			w.idle.Add(-1)
		case <-done:
			w.idle.Add(-1)
			return
		}
	}
}
