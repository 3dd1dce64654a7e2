package protocol

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol/pb"
)

// DelegationOffer asks a provider to run a task (requester → provider).
type DelegationOffer struct {
	ID           DelegationID // chosen by the requester; never zero
	Profile      string
	Task         Task
	ContextID    ContextID
	BudgetTokens uint64
	// Timeout is how long the requester will wait, in whole milliseconds on
	// the wire (up to ~49 days); 0 leaves it to the provider.
	Timeout time.Duration
	// HopLimit is how many more providers the task may reach, this one
	// included: a provider that receives 0 rejects it loop_detected, and a
	// forwarded offer carries one less. At most MaxHopLimit.
	HopLimit uint32
	Chain    []peer.ID    // peers the task has passed, oldest first
	Priority int32        // higher runs first
	ParentID DelegationID // the delegation this one was spawned by; zero if none
}

func (*DelegationOffer) Type() MessageType { return TypeDelegationOffer }

func (o *DelegationOffer) check() error {
	if err := checkDelegationID("delegation_id", o.ID); err != nil {
		return err
	}
	if err := checkProfileName("profile", o.Profile); err != nil {
		return err
	}
	if err := within("task", o.Task.check()); err != nil {
		return err
	}
	if err := checkLen("context_id", string(o.ContextID), MaxContextIDLen); err != nil {
		return err
	}
	if _, err := durationToWire("timeout_ms", o.Timeout); err != nil {
		return err
	}
	if o.HopLimit > MaxHopLimit {
		return invalid("hop_limit", "%d, limit %d", o.HopLimit, MaxHopLimit)
	}
	if err := checkCount("chain", len(o.Chain), MaxChain); err != nil {
		return err
	}
	for i, p := range o.Chain {
		if err := at("chain", i, checkPeer("", p)); err != nil {
			return err
		}
	}
	if o.ParentID == o.ID {
		return invalid("parent_id", "a delegation cannot be its own parent")
	}
	return nil
}

func (o *DelegationOffer) toWire() (*pb.DelegationOffer, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	task, err := o.Task.toWire()
	if err != nil {
		return nil, within("task", err)
	}
	timeout, _ := durationToWire("timeout_ms", o.Timeout) // checked above
	w := &pb.DelegationOffer{
		DelegationId: o.ID[:],
		Profile:      o.Profile,
		Task:         task,
		ContextId:    string(o.ContextID),
		BudgetTokens: o.BudgetTokens,
		TimeoutMs:    timeout,
		HopLimit:     o.HopLimit,
		Priority:     o.Priority,
	}
	if !o.ParentID.IsZero() {
		w.ParentId = o.ParentID[:]
	}
	for _, p := range o.Chain {
		w.Chain = append(w.Chain, []byte(p))
	}
	return w, nil
}

func delegationOfferFromWire(w *pb.DelegationOffer) (*DelegationOffer, error) {
	id, err := delegationIDFromWire("delegation_id", w.GetDelegationId())
	if err != nil {
		return nil, err
	}
	var parent DelegationID
	if b := w.GetParentId(); len(b) > 0 {
		if parent, err = delegationIDFromWire("parent_id", b); err != nil {
			return nil, err
		}
	}
	task, err := taskFromWire(w.GetTask())
	if err != nil {
		return nil, within("task", err)
	}
	chain := w.GetChain()
	if err := checkCount("chain", len(chain), MaxChain); err != nil {
		return nil, err
	}
	o := &DelegationOffer{
		ID:           id,
		Profile:      w.GetProfile(),
		Task:         task,
		ContextID:    ContextID(w.GetContextId()),
		BudgetTokens: w.GetBudgetTokens(),
		Timeout:      durationFromWire(w.GetTimeoutMs()),
		HopLimit:     w.GetHopLimit(),
		Priority:     w.GetPriority(),
		ParentID:     parent,
	}
	if len(chain) > 0 {
		o.Chain = make([]peer.ID, len(chain))
	}
	for i, b := range chain {
		if o.Chain[i], err = peerFromWire("", b); err != nil {
			return nil, at("chain", i, err)
		}
	}
	return o, o.check()
}
