package delegation

import (
	"context"
	"testing"
	"time"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// TestWaitAfterMissedEvents: Wait reads the record only when an event says
// the state is terminal, unless its channel overflowed and it may have
// missed that event: then it reads on the next one. Here the terminal
// transition's own event is lost to a full channel; a Wait that trusted
// the events alone would never return.
func TestWaitAfterMissedEvents(t *testing.T) {
	nd := newMesh(t, 1, nil)[0]
	e := nd.eng
	id := protocol.NewDelegationID()
	if err := e.create(store.Delegation{ID: id, Role: store.RoleRequester, Peer: nd.host.ID(), State: protocol.StateOffered}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type waited struct {
		d   store.Delegation
		err error
	}
	got := make(chan waited, 1)
	go func() {
		d, err := e.Wait(ctx, id)
		got <- waited{d, err}
	}()
	// Until Wait has subscribed.
	k := subKey{store.RoleRequester, id}
	for {
		e.subsMu.Lock()
		n := len(e.subs[k])
		e.subsMu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Publish faster than Wait drains its channel (it holds 64) until an
	// event has been dropped.
	missed := func() bool {
		e.subsMu.Lock()
		defer e.subsMu.Unlock()
		for _, m := range e.subs[k] {
			return m.Load()
		}
		return false
	}
	for i := 0; !missed(); i++ {
		if ctx.Err() != nil {
			t.Fatal("no event was ever dropped: Wait drained 64 faster than they were published")
		}
		for range 256 {
			e.publish(store.RoleRequester, id, store.Event{Seq: uint64(i + 2), Type: EventStatus, State: protocol.StateRunning})
		}
	}
	// The terminal state is written and its event never published.
	if _, err := e.st.TransitionAfter(store.RoleRequester, id, nil, protocol.StateCompleted, store.Event{}, nil); err != nil {
		t.Fatal(err)
	}
	e.publish(store.RoleRequester, id, store.Event{Type: EventStatus, State: protocol.StateRunning})
	w := <-got
	if w.err != nil {
		t.Fatalf("Wait: %v (it missed the terminal event and never read the record again)", w.err)
	}
	if w.d.State != protocol.StateCompleted {
		t.Fatalf("Wait returned state %s, want completed", w.d.State)
	}
}
