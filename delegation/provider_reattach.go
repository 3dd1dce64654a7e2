package delegation

import (
	"context"
	"crypto/sha256"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Finding a delegation again, the provider's side: the key under which a
// requester's ID is kept (providerKey), and a requester's reattach after a
// lost stream (serveReattach), which replays what was sent so far.

// providerKey is where this node keeps the delegation that remote calls
// id, and whether it has one. IDs are the requester's choice, so two peers
// may name the same one (never by chance: to probe, on purpose). The first
// keeps it; a later peer's is kept under an ID derived from its peer ID and
// the one it chose. Each peer so sees only its own delegations, and an
// offer or a query answers the same whether or not another peer uses the ID.
func (e *providerHalf) providerKey(remote peer.ID, id protocol.DelegationID) (protocol.DelegationID, bool) {
	owner, ok := e.owner(id)
	if !ok {
		return id, false
	}
	if owner == remote {
		return id, true
	}
	h := sha256.New()
	h.Write([]byte("kith/provider-key/v1\x00"))
	h.Write([]byte(remote))
	h.Write(id[:])
	var key protocol.DelegationID
	copy(key[:], h.Sum(nil))
	owner, ok = e.owner(key)
	return key, ok && owner == remote
}

// owner is the requester of the provider delegation kept under key: a task
// running, stored or not yet (see openDelay), or one in the store.
func (e *providerHalf) owner(key protocol.DelegationID) (peer.ID, bool) {
	e.provMu.Lock()
	t := e.running[key]
	e.provMu.Unlock()
	if t != nil && t.role == store.RoleProvider {
		return t.requester, true
	}
	d, err := e.st.DelegationInfo(store.RoleProvider, key)
	if err != nil {
		return "", false
	}
	return d.Peer, true
}

// settle makes sure that a task running unstored (see openDelay) is in the
// store before a reattach reads its log: it stores it now, or waits for
// the write that stores it with its result.
func (e *providerHalf) settle(ctx context.Context, key protocol.DelegationID) {
	e.provMu.Lock()
	t := e.running[key]
	e.provMu.Unlock()
	if t == nil || t.role != store.RoleProvider {
		return
	}
	if open, _ := e.openTask(t); open {
		return
	}
	select {
	case <-t.done:
	case <-ctx.Done():
	}
}

// serveReattach answers a requester's "where is delegation X": it replays
// everything sent so far and, while the task runs, attaches the stream.
// It returns the requester's next offer when one came on the stream after
// the result (nil otherwise).
func (e *providerHalf) serveReattach(ctx context.Context, c *protocol.Conn, remote peer.ID, q *protocol.DelegationStatus) (protocol.Message, []byte) {
	key, found := e.providerKey(remote, q.ID)
	if found {
		e.settle(ctx, key)
	}
	if !found {
		// Unknown, or someone else's: the same answer, so that IDs cannot be probed.
		_ = e.send(c, remote, &protocol.DelegationStatus{ID: q.ID, State: protocol.StateUnknown})
		return nil, nil
	}
	e.provMu.Lock()
	t := e.running[key]
	if t != nil {
		t.mu.Lock() // hold off live sends while the history is read and replayed
	}
	e.provMu.Unlock()
	events, err := e.st.Events(store.RoleProvider, key, 0)
	if err != nil {
		if t != nil {
			t.mu.Unlock()
		}
		return nil, nil
	}
	if t != nil {
		ok := true
		for _, raw := range history(events) {
			if c.SendEncoded(raw) != nil {
				ok = false
				break
			}
		}
		if ok {
			t.conn = c
		}
		t.mu.Unlock()
		if ok {
			return e.readRequester(ctx, c, remote, t)
		}
		return nil, nil
	}
	// Finished: replay, then the stored result.
	for _, raw := range history(events) {
		if c.SendEncoded(raw) != nil {
			return nil, nil
		}
	}
	d, err := e.st.GetDelegation(store.RoleProvider, key)
	if err != nil || len(d.Result) == 0 {
		return nil, nil
	}
	if c.SendEncoded(d.Result) != nil {
		return nil, nil
	}
	// A result is stored before it is sent again: confirmed at once to an
	// offer that asked for provisional results (1.5).
	if protocol.OfferAsksProvisional(d.Offer) {
		stored, err := storedConfirmation(q.ID, d.State)
		if err != nil || c.SendEncoded(stored) != nil {
			return nil, nil
		}
	}
	// Wait for the requester to close its side, its acknowledgement, or to
	// send its next offer on the stream (1.4).
	m, raw, err := c.RecvRaw(c.IOTimeout())
	if err != nil {
		return nil, nil
	}
	e.trace(Received, remote, m)
	if o, ok := m.(*protocol.DelegationOffer); ok && o.ID != q.ID {
		return o, raw
	}
	return nil, nil
}
