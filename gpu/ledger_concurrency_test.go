package gpu

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLedgerConcurrentRequests throws 1,000 concurrent lease requests
// (local and remote, random sizes, random hold times) at a fixed inventory.
// After every change, under the ledger's lock, the books must balance and no
// device may be leased past its capacity; no local lease may ever be
// revoked; and when everything has ended, nothing is leased.
func TestLedgerConcurrentRequests(t *testing.T) {
	const requests = 1000
	inv := NewFake(gpuFree(0, 24000), gpuFree(1, 16000), gpuFree(2, 8000))
	l := NewLedger(inv, 512, nil)
	var ops, violations atomic.Int64
	var firstViolation atomic.Value
	l.afterOp = func() {
		ops.Add(1)
		if err := l.checkLocked(); err != nil {
			if violations.Add(1) == 1 {
				firstViolation.Store(err.Error())
			}
		}
		// An independent sum, not the ledger's running totals.
		for _, s := range l.slots {
			var sum uint64
			for _, ls := range l.active {
				if ls.slot == s {
					sum += ls.mib
				}
			}
			if sum > s.capacity {
				if violations.Add(1) == 1 {
					firstViolation.Store("oversubscribed " + s.key)
				}
			}
		}
	}
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}

	var granted, refused, preempted, localRevoked atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(42, uint64(i)))
			req := LeaseRequest{
				Owner:   "req",
				VRAMMiB: 1 + rng.Uint64N(12000),
				Local:   rng.IntN(4) == 0,
			}
			hold := time.Duration(rng.IntN(300)) * time.Microsecond
			<-start
			ls, err := l.Grant(req)
			if err != nil {
				refused.Add(1)
				return
			}
			granted.Add(1)
			select {
			case <-ls.Revoked():
			case <-time.After(hold):
			}
			ls.Release() // a no-op if it was revoked, even after the timer
			if errors.Is(ls.Err(), ErrPreempted) {
				preempted.Add(1)
				if ls.Local() {
					localRevoked.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()

	if n := violations.Load(); n > 0 {
		t.Fatalf("%d invariant violations over %d ledger changes; first: %v", n, ops.Load(), firstViolation.Load())
	}
	if n := localRevoked.Load(); n > 0 {
		t.Fatalf("%d local leases were revoked", n)
	}
	if granted.Load()+refused.Load() != requests {
		t.Fatalf("granted %d + refused %d != %d", granted.Load(), refused.Load(), requests)
	}
	if granted.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("no contention: granted %d, refused %d", granted.Load(), refused.Load())
	}
	// Every change is a grant, a release of a lease that was not revoked,
	// or the one Refresh; refusals and no-op releases change nothing.
	if want := 2*granted.Load() - preempted.Load() + 1; ops.Load() != want {
		t.Fatalf("%d ledger changes, want %d", ops.Load(), want)
	}
	if got := l.Leases(); len(got) != 0 {
		t.Fatalf("%d leases left after every holder released", len(got))
	}
	for _, r := range l.Room() {
		if r.LeasedMiB != 0 || r.AvailableMiB != r.CapacityMiB {
			t.Fatalf("device %d still leased after the storm: %+v", r.Device.Index, r)
		}
	}
	t.Logf("%d requests: %d granted (%d later preempted), %d refused; %d ledger changes checked",
		requests, granted.Load(), preempted.Load(), refused.Load(), ops.Load())
}
