package delegation

import (
	"context"
	"fmt"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Get returns a delegation this node requested.
func (e *core) Get(id protocol.DelegationID) (store.Delegation, error) {
	d, err := e.st.GetDelegation(store.RoleRequester, id)
	if err != nil {
		return d, fmt.Errorf("%w: %s: %v", ErrUnknown, id, err)
	}
	return d, nil
}

// Wait blocks until the delegation this node requested is terminal, or ctx
// ends. It returns the delegation with its Result but without its Offer
// (Get has both): a waiter has the task it sent, and reading a large one
// back would cost more than the rest of the wait.
func (e *core) Wait(ctx context.Context, id protocol.DelegationID) (store.Delegation, error) {
	if d := e.takeFinal(id); d != nil {
		return *d, nil
	}
	ch, sub, cancel := e.subscribe(store.RoleRequester, id, waitBuffer)
	defer cancel()
	// The delegation is read only when it may have changed to a terminal
	// state: at first, unless a follower drives it and its end has not
	// been published (subscription.live: the event that ends it comes to
	// this subscription); on an event whose state is terminal (every
	// state change is published with the state it made); and once an
	// event was missed. The first read takes the record alone; after a
	// terminal event, the transition that wrote it usually handed the
	// delegation over (subscription.final), and nothing is read.
	if !sub.live {
		d, err := e.st.DelegationInfo(store.RoleRequester, id)
		if err != nil {
			return d, fmt.Errorf("%w: %s: %v", ErrUnknown, id, err)
		}
		if d.State.Terminal() {
			return e.finished(id)
		}
	}
	for {
		select {
		case <-ctx.Done():
			d, _ := e.st.DelegationInfo(store.RoleRequester, id)
			return d, ctx.Err()
		case ev := <-ch:
			if f := sub.final.Load(); f != nil {
				return *f, nil
			}
			if !ev.State.Terminal() && !sub.missed.Load() {
				continue
			}
			if d, err := e.finished(id); err != nil || d.State.Terminal() {
				return d, err
			}
		}
	}
}

// Finals: a delegation whose result came before its record was written
// ends in the write that creates it (createWithResult), before Delegate
// returns and so before its caller can subscribe; reading it back at once
// would wait for the store to apply that write. The record is kept for
// the first Wait instead. At most maxFinals are kept (a caller may never
// wait), holding results of maxFinalBytes together, each of up to
// maxFinalResult bytes, and any later event of the delegation drops its
// record (publishFinal). A result read back costs a copy of it from the
// store: 0.25 ms of a 2.3 ms delegation of 128 KiB (docs/performance.md).
const (
	maxFinals      = 256
	maxFinalBytes  = 16 << 20
	maxFinalResult = 1 << 20
)

// keepFinal keeps d, terminal and without its offer, for takeFinal.
func (e *core) keepFinal(d *store.Delegation) {
	if len(d.Result) > maxFinalResult {
		return
	}
	e.subsMu.Lock()
	defer e.subsMu.Unlock()
	e.dropFinal(d.ID)
	for id := range e.finals {
		if len(e.finals) < maxFinals && e.finalBytes+len(d.Result) <= maxFinalBytes {
			break
		}
		e.dropFinal(id)
	}
	e.finals[d.ID] = d
	e.finalBytes += len(d.Result)
}

// takeFinal returns the record keepFinal kept for id, if any, once.
func (e *core) takeFinal(id protocol.DelegationID) *store.Delegation {
	e.subsMu.Lock()
	defer e.subsMu.Unlock()
	d := e.finals[id]
	e.dropFinal(id)
	return d
}

// dropFinal forgets the record kept for id, if any; e.subsMu is held.
func (e *core) dropFinal(id protocol.DelegationID) {
	if d, ok := e.finals[id]; ok {
		e.finalBytes -= len(d.Result)
		delete(e.finals, id)
	}
}

// finished reads a delegation this node requested, with its Result and
// without its Offer.
func (e *core) finished(id protocol.DelegationID) (store.Delegation, error) {
	d, err := e.st.DelegationResult(store.RoleRequester, id)
	if err != nil {
		return d, fmt.Errorf("%w: %s: %v", ErrUnknown, id, err)
	}
	return d, nil
}

// Result decodes the stored result of a finished delegation. Its large
// texts share d.Result's memory (protocol.DecodeMessageInPlace): d.Result,
// which the store and the engine hand out and never write to, must not
// be changed afterwards.
func Result(d store.Delegation) (*protocol.DelegationResult, error) {
	if len(d.Result) == 0 {
		return nil, fmt.Errorf("delegation %s has no result (state %s)", d.ID, d.State)
	}
	m, err := protocol.DecodeMessageInPlace(d.Result)
	if err != nil {
		return nil, err
	}
	r, ok := m.(*protocol.DelegationResult)
	if !ok {
		return nil, fmt.Errorf("delegation %s: stored result is a %s", d.ID, m.Type())
	}
	return r, nil
}

// Output is the text of a finished delegation's result.
func Output(d store.Delegation) string {
	r, err := Result(d)
	if err != nil {
		return ""
	}
	return partsText(r.Output)
}

// Verify re-checks the stored result proof of a delegation this node
// requested: the provider's signature over the exact bytes, and that it
// matches the offer, the transcript and the result stored here.
func (e *core) Verify(id protocol.DelegationID) (protocol.ResultProof, error) {
	d, err := e.Get(id)
	if err != nil {
		return protocol.ResultProof{}, err
	}
	r, err := Result(d)
	if err != nil {
		return protocol.ResultProof{}, err
	}
	signer := d.Peer
	if !d.Remote {
		signer = e.id.PeerID()
	}
	p, err := protocol.VerifyResultProof(signer, r.Proof)
	if err != nil {
		return p, fmt.Errorf("%w: %v", ErrProofInvalid, err)
	}
	events, err := e.st.Events(store.RoleRequester, id, 0)
	if err != nil {
		return p, err
	}
	d.Peer = signer
	return p, matchProof(p, d, p.Digest.Sum(d.Offer), outputSum(p, r), e.id.PeerID(), r, events, reoffered(events))
}

// Node is one delegation in a tree.
type Node struct {
	Delegation store.Delegation
	Children   []*Node
}

// Tree returns the delegations this node requested, as trees of parents
// and children, roots newest first. A delegation whose parent ran here as a
// provider (a child spawned while serving a peer) hangs under that
// provider-side record. Each is as a listing reads it (store.DelegationFilter
// Listing): no offer, and a result only up to store.ListResultMax bytes.
func (e *core) Tree(limit int) ([]*Node, error) {
	all, err := e.st.ListDelegations(store.DelegationFilter{Limit: limit, Listing: true})
	if err != nil {
		return nil, err
	}
	nodes := make(map[protocol.DelegationID]*Node, len(all))
	for _, d := range all {
		if _, dup := nodes[d.ID]; dup && d.Role == store.RoleProvider {
			continue // the requester record wins when a node delegated to itself
		}
		nodes[d.ID] = &Node{Delegation: d}
	}
	var roots []*Node
	for _, d := range all {
		n := nodes[d.ID]
		if n.Delegation.Role != d.Role {
			continue
		}
		if parent, ok := nodes[d.Parent]; ok && !d.Parent.IsZero() {
			parent.Children = append(parent.Children, n)
		} else {
			roots = append(roots, n)
		}
	}
	return roots, nil
}
