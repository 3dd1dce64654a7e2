package store

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestCommitVisibleOnReturn: a durable write returns once its record is
// durable, before badger has applied it, and yet every read that starts
// after it returns sees it (badger starts a transaction only once the
// commits before it are applied).
func TestCommitVisibleOnReturn(t *testing.T) {
	s, _ := openTest(t, Options{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			key := fmt.Sprintf("k%d", w)
			for i := range 100 {
				v := []byte(fmt.Sprint(i))
				if err := s.PutMeta(key, v); err != nil {
					t.Error(err)
					return
				}
				if got, err := s.GetMeta(key); err != nil || !bytes.Equal(got, v) {
					t.Errorf("%s read right after writing %q: %q, %v", key, v, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestCommitApplyFailsAfterLog: a batch whose record is durable in the log
// but which badger then fails to apply was acknowledged. Its writer hears
// success without waiting for the apply, every later write is refused with
// the reason, and the next open replays the batch from the log.
func TestCommitApplyFailsAfterLog(t *testing.T) {
	s, dir := openTest(t, Options{})
	mustNoErr(t, s.Close())
	lost, _ := crash(t, dir, func(s *Store) {
		log := s.commits.log
		release := make(chan struct{})
		log.applyFault = func() error {
			<-release
			return errors.New("disk gone")
		}
		done := make(chan error, 1)
		go func() { done <- s.PutMeta("acknowledged", []byte("a")) }()
		select {
		case err := <-done:
			mustNoErr(t, err)
		case <-time.After(10 * time.Second):
			close(release)
			t.Fatal("the write waited for badger to apply it")
		}
		close(release)
		log.applying.Wait()
		log.applyFault = nil
		err := s.PutMeta("refused", []byte("b"))
		if err == nil || !strings.Contains(err.Error(), "restart the node") {
			t.Fatalf("write after a failed apply: %v, want the log's refusal", err)
		}
	})
	r := openAt(t, lost, Options{})
	if got, ok := getMetaOK(t, r, "acknowledged"); !ok || string(got) != "a" {
		t.Errorf("acknowledged write after reopening: %q (found %v), want %q", got, ok, "a")
	}
	if _, ok := getMetaOK(t, r, "refused"); ok {
		t.Error("a refused write is in the store")
	}
	mustNoErr(t, r.PutMeta("later", []byte("c"))) // the reopened store takes writes
}

// TestQuiet: a store is quiet while no write is being committed or waits,
// and not while one is.
func TestQuiet(t *testing.T) {
	s, _ := openTest(t, Options{})
	if !s.Quiet() {
		t.Fatal("a store with no write in flight is not quiet")
	}
	in, out := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.update([]string{"quiet-test"}, func(txn *wtxn) error {
			close(in)
			<-out
			return txn.Set([]byte("quiet-test"), []byte{1})
		})
	}()
	<-in
	if s.Quiet() {
		t.Fatal("a store committing a write is quiet")
	}
	close(out)
	mustNoErr(t, <-done)
	if !s.Quiet() {
		t.Fatal("a store is not quiet once its write returned")
	}
}
