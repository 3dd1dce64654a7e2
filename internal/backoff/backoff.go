// Package backoff is the one schedule kith's retry loops wait on: a wait
// that starts at Initial, doubles after every failure up to Max, and goes
// back to Initial after a success. The loops that use it (static peers and
// DNS-SD domains in node, a requester reattaching to its provider in
// delegation) run for the node's life, keep one schedule per thing they
// retry, and reset it on progress, so they own their loop and ask only
// for the next wait.
//
// It is deterministic on purpose (no jitter): the loops retry a handful of
// peers or domains, not a crowd that could retry in step, and tests check
// the exact waits under testing/synctest.
package backoff

import (
	"context"
	"time"
)

// Backoff is one retry schedule. The zero value waits 0 every time; set
// Initial and Max.
type Backoff struct {
	Initial time.Duration // the first wait, and the wait after Reset
	Max     time.Duration // no wait is longer
	next    time.Duration // 0: Initial
}

// Next returns the wait before the next try, and doubles the one after it,
// never beyond Max.
func (b *Backoff) Next() time.Duration {
	if b.next <= 0 {
		b.next = b.Initial
	}
	d := min(b.next, b.Max)
	b.next = min(2*d, b.Max)
	return d
}

// Reset starts the schedule again at Initial, after a success.
func (b *Backoff) Reset() { b.next = 0 }

// Sleep waits d, or until ctx ends; it reports whether the whole wait
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
