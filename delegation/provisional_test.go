package delegation

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Provisional results (protocol 1.5): the provider's write of a fast task
// overlaps the result's trip and the requester's own write.

// waitStored polls n's store until its record of id satisfies ok, or
// fails the test at its deadline.
func waitStored(t *testing.T, ctx context.Context, n *testNode, role store.Role, id protocol.DelegationID, what string, ok func(store.Delegation, error) bool) {
	t.Helper()
	var (
		d   store.Delegation
		err error
	)
	if !labtest.Until(time.Until(deadline(ctx)), func() bool {
		d, err = n.st.DelegationInfo(role, id)
		return ok(d, err)
	}) {
		t.Fatalf("%s: not before the deadline (state %s, err %v)", what, d.State, err)
	}
}

// waitKept polls until a keeps want streams to b for its next offers.
func waitKept(t *testing.T, ctx context.Context, a, b *testNode, want int, what string) {
	t.Helper()
	if !labtest.Until(time.Until(deadline(ctx)), func() bool { return a.engine().idle.count(b.id.PeerID()) == want }) {
		t.Fatalf("%s: %d streams kept, want %d", what, a.engine().idle.count(b.id.PeerID()), want)
	}
}

// deadline is ctx's deadline; the tests here always set one.
func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// TestProvisionalResult: the provider sends the result before its record
// is written; the requester checks and stores it, and reports it, while
// the provider's write waits; the provider confirms once its record is
// durable, and only then does the requester keep the stream for its next
// offer.
func TestProvisionalResult(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodes := newMesh(t, 2, nil)
	a, b := nodes[0], nodes[1]
	b.engine().SetOpenDelay(time.Minute) // the task ends first: its one write comes at its end
	release := make(chan struct{})
	b.engine().SetBeforeMergedWrite(func() { <-release })
	id, err := a.engine().Delegate(ctx, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("early"), BudgetTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateCompleted || Output(d) != "early" {
		t.Fatalf("wait: %s %q, %v", d.State, Output(d), err)
	}
	if _, err := b.st.DelegationInfo(store.RoleProvider, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the provider's record is there before its write (err %v): the result was not provisional", err)
	}
	if n := a.engine().idle.count(b.id.PeerID()); n != 0 {
		t.Fatalf("%d streams kept before the provider confirmed", n)
	}
	close(release)
	waitKept(t, ctx, a, b, 1, "after the confirmation")
	p, err := b.st.DelegationInfo(store.RoleProvider, id)
	if err != nil || p.State != protocol.StateCompleted {
		t.Fatalf("the provider's record after its confirmation: %s, %v", p.State, err)
	}
}

// TestProvisionalResultUnconfirmed: when the stream ends between the
// result and its confirmation (the provider died, or could not store its
// record), the result the requester checked and stored stands, and the
// stream is not kept.
func TestProvisionalResultUnconfirmed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodes := newMesh(t, 2, nil)
	a, b := nodes[0], nodes[1]
	b.engine().SetOpenDelay(time.Minute)
	var id protocol.DelegationID
	idSet, disconnected := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	b.engine().SetBeforeMergedWrite(func() {
		// Once the requester holds the result, the connection goes,
		// before the provider's write: no confirmation can come.
		<-idSet
		for ctx.Err() == nil {
			if d, err := a.st.DelegationInfo(store.RoleRequester, id); err == nil && d.State.Terminal() {
				break
			}
			time.Sleep(time.Millisecond)
		}
		_ = b.mn.UnlinkPeers(a.host.ID(), b.host.ID())
		_ = b.mn.DisconnectPeers(a.host.ID(), b.host.ID())
		close(disconnected)
		<-release
	})
	id, err := a.engine().Delegate(ctx, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("kept"), BudgetTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	close(idSet)
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateCompleted || Output(d) != "kept" {
		t.Fatalf("wait: %s %q, %v", d.State, Output(d), err)
	}
	select {
	case <-disconnected:
	case <-ctx.Done():
		t.Fatal("the provider never came to its write")
	}
	// The reader gives up on the confirmation once the stream ends; the
	// stream is not kept, and the result is unchanged.
	waitStored(t, ctx, a, store.RoleRequester, id, "the result stands", func(d store.Delegation, err error) bool {
		return err == nil && d.State == protocol.StateCompleted
	})
	if n := a.engine().idle.count(b.id.PeerID()); n != 0 {
		t.Fatalf("%d streams kept without a confirmation", n)
	}
}
