package delegation

import (
	"context"
	"fmt"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// delegateLocal runs a local profile in-process: the same offer, state
// machine, event log and signed result as a remote delegation, with this
// node as both requester and provider and no network.
func (e *providerHalf) delegateLocal(ctx context.Context, req Request) (protocol.DelegationID, error) {
	p, ok := e.profile(req.Profile)
	if !ok {
		return protocol.DelegationID{}, fmt.Errorf("%w: no local profile %q", ErrNoProvider, req.Profile)
	}
	self := e.id.PeerID()
	if req.BudgetTokens == 0 {
		req.BudgetTokens = p.MaxBudgetTokens
	}
	offer := &protocol.DelegationOffer{
		ID: protocol.NewDelegationID(), Profile: req.Profile, Task: req.Task, ContextID: req.ContextID,
		BudgetTokens: req.BudgetTokens, Timeout: req.Timeout, HopLimit: req.HopLimit,
		Chain: append(req.Chain, self), Priority: req.Priority, ParentID: req.Parent,
		MultiTurn:   true, // this node answers its own questions (Reply)
		ProofDigest: e.digest,
	}
	raw, err := protocol.EncodeMessage(offer)
	if err != nil {
		return protocol.DelegationID{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	e.runMu.Lock()
	runCtx := e.runCtx
	e.runMu.Unlock()
	if runCtx == nil {
		return protocol.DelegationID{}, ErrNotRunning
	}
	now := e.cfg.Now()
	timeout := e.timeoutFor(p, req.Timeout)
	d := store.Delegation{
		ID: offer.ID, Role: store.RoleRequester, Parent: req.Parent, ContextID: req.ContextID,
		Profile: req.Profile, State: protocol.StateRunning, BudgetTokens: req.BudgetTokens,
		Offer: raw, Deadline: now.Add(timeout),
	}
	// The budget rule applies to local work too.
	if p.MaxBudgetTokens > 0 && req.BudgetTokens > p.MaxBudgetTokens {
		d.State = protocol.StateRejected
		d.Reason = fmt.Sprintf("%s: budget %d above profile maximum %d", protocol.ReasonBudgetTooHigh, req.BudgetTokens, p.MaxBudgetTokens)
		return offer.ID, e.create(d, store.Event{Type: EventRejected})
	}
	t := &task{
		id: offer.ID, wire: offer.ID, role: store.RoleRequester, requester: self, offer: offer,
		offerHash: digestOf(e.proofDigest(offer), raw), profile: p, deadline: d.Deadline, done: make(chan struct{}),
	}
	// Local work leases its VRAM with priority: remote leases in the way
	// are revoked and their delegations end preempted.
	lease, rej := e.lease(p, offer.ID, true)
	if rej != nil {
		d.State, d.Reason = protocol.StateRejected, rej.Reason.String()+": "+rej.Detail
		return offer.ID, e.create(d, store.Event{Type: EventRejected})
	}
	t.lease = lease
	accept, running, err := t.openingEvents()
	if err != nil {
		t.releaseLease()
		return protocol.DelegationID{}, err
	}
	if err := e.create(d, accept, running); err != nil {
		t.releaseLease()
		return protocol.DelegationID{}, err
	}
	t.logged = []store.Event{accept, running}
	e.startTask(runCtx, t)
	return offer.ID, nil
}
