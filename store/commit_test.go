package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kithmesh/kith/protocol"
)

// TestGroupCommitDropsOnlyTheFailedWrite runs many concurrent writers, half
// of which write and then fail: every successful writer's key must be
// there after the commits, no failed writer's key may be, and each writer
// gets its own error back, whichever batch carried it.
func TestGroupCommitDropsOnlyTheFailedWrite(t *testing.T) {
	s, dir := openTest(t, Options{})
	errBoom := errors.New("boom")
	const n = 200
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte(fmt.Sprintf("meta/t/%03d", i))
			errs[i] = s.update(nil, func(txn *wtxn) error {
				if err := txn.Set(key, []byte{byte(i)}); err != nil {
					return err
				}
				if i%2 == 1 {
					return fmt.Errorf("writer %d: %w", i, errBoom)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	s = reopen(t, s, dir, Options{})
	for i := range n {
		_, err := s.GetMeta(fmt.Sprintf("t/%03d", i))
		if i%2 == 1 {
			if !errors.Is(errs[i], errBoom) {
				t.Errorf("writer %d: err %v, want its own error", i, errs[i])
			}
			if !errors.Is(err, ErrNotFound) {
				t.Errorf("writer %d failed, but its key reads back (err %v)", i, err)
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("writer %d: %v", i, errs[i])
		}
		if err != nil {
			t.Errorf("writer %d succeeded, but its key is gone: %v", i, err)
		}
	}
}

// TestGroupCommitOrdersWritersOfOneRecord appends events to one delegation
// from many goroutines at once: the log must come out gap-free, one event
// per call, whatever batches they shared.
func TestGroupCommitOrdersWritersOfOneRecord(t *testing.T) {
	s, _ := openTest(t, Options{})
	d := Delegation{ID: protocol.NewDelegationID(), Role: RoleProvider, State: protocol.StateRunning}
	mustNoErr(t, s.CreateDelegation(d))
	const n = 100
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.AppendEvent(d.Role, d.ID, Event{Type: "progress"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	evs, err := s.Events(d.Role, d.ID, 0)
	mustNoErr(t, err)
	if len(evs) != n {
		t.Fatalf("%d events, want %d", len(evs), n)
	}
	for i, ev := range evs {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
}
