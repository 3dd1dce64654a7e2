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
	// MultiTurn (1.3): the requester can answer a status of state
	// input_required with a DelegationContinue. Set it only for a provider
	// that speaks MultiTurn.
	MultiTurn bool
	// ProvisionalResult (1.5): the requester takes a result sent before
	// the provider's record of it is durable, confirmed by a status with
	// Stored set (see ProvisionalResults). Set it only for a provider that
	// speaks ProvisionalResults.
	ProvisionalResult bool
	// ProofDigest (1.6) is the hash the requester would have the result's
	// proof made with; the provider uses it or SHA-256, and the proof says
	// which (ResultProof.Digest). Set it only for a provider that speaks
	// ProofDigests; an older one ignores it and uses SHA-256.
	ProofDigest ProofDigest
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
	return checkDigest("proof_digest", o.ProofDigest)
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
		DelegationId:      o.ID[:],
		Profile:           o.Profile,
		Task:              task,
		ContextId:         string(o.ContextID),
		BudgetTokens:      o.BudgetTokens,
		TimeoutMs:         timeout,
		HopLimit:          o.HopLimit,
		Priority:          o.Priority,
		MultiTurn:         o.MultiTurn,
		ProvisionalResult: o.ProvisionalResult,
		ProofDigest:       digestToWire(o.ProofDigest),
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
	if w.GetTurn() != 0 {
		return nil, invalid("turn", "%d on a first offer (a continuation decodes as DelegationContinue)", w.GetTurn())
	}
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
	alg, err := digestFromWireEnum("proof_digest", w.GetProofDigest())
	if err != nil {
		return nil, err
	}
	o := &DelegationOffer{
		ID:                id,
		Profile:           w.GetProfile(),
		Task:              task,
		ContextID:         ContextID(w.GetContextId()),
		BudgetTokens:      w.GetBudgetTokens(),
		Timeout:           durationFromWire(w.GetTimeoutMs()),
		HopLimit:          w.GetHopLimit(),
		Priority:          w.GetPriority(),
		ParentID:          parent,
		MultiTurn:         w.GetMultiTurn(),
		ProvisionalResult: w.GetProvisionalResult(),
		ProofDigest:       alg,
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

// DelegationContinue (1.3) answers a provider's input_required: it carries
// the next turn's input for delegation ID, which goes on with the same
// provider, under the first offer's profile, budget and deadline. On the
// wire it is a delegation_offer whose turn is 2 or more and which carries
// nothing but delegation_id, turn and task; DecodeMessage returns one for
// such an offer, so a type switch over messages never takes a
// continuation for a fresh offer. A requester sends it only to a provider
// that speaks MultiTurn, for a delegation it offered multi_turn.
type DelegationContinue struct {
	ID   DelegationID
	Turn uint32 // the turn it starts: 2 for the answer to the first question
	Task Task   // the answer
}

// Type is TypeDelegationOffer: a continuation travels as an offer.
func (*DelegationContinue) Type() MessageType { return TypeDelegationOffer }

func (c *DelegationContinue) check() error {
	if err := checkDelegationID("delegation_id", c.ID); err != nil {
		return err
	}
	if c.Turn < 2 || c.Turn > MaxTurns {
		return invalid("turn", "%d; a continuation starts turn 2..%d", c.Turn, MaxTurns)
	}
	if len(c.Task.Parts) == 0 {
		return invalid("task.parts", "a continuation carries the answer")
	}
	return within("task", c.Task.check())
}

func (c *DelegationContinue) toWire() (*pb.DelegationOffer, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	task, err := c.Task.toWire()
	if err != nil {
		return nil, within("task", err)
	}
	return &pb.DelegationOffer{DelegationId: c.ID[:], Task: task, Turn: c.Turn}, nil
}

// delegationContinueFromWire decodes an offer whose turn is set. Any field
// of a first offer in it is refused: a continuation cannot change what the
// first offer settled, and a value that would be ignored is a sender's bug
// better reported than hidden.
func delegationContinueFromWire(w *pb.DelegationOffer) (*DelegationContinue, error) {
	id, err := delegationIDFromWire("delegation_id", w.GetDelegationId())
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"profile", w.GetProfile() != ""},
		{"context_id", w.GetContextId() != ""},
		{"budget_tokens", w.GetBudgetTokens() != 0},
		{"timeout_ms", w.GetTimeoutMs() != 0},
		{"hop_limit", w.GetHopLimit() != 0},
		{"chain", len(w.GetChain()) != 0},
		{"priority", w.GetPriority() != 0},
		{"parent_id", len(w.GetParentId()) != 0},
		{"multi_turn", w.GetMultiTurn()},
		{"provisional_result", w.GetProvisionalResult()},
		{"proof_digest", w.GetProofDigest() != pb.ProofDigest_PROOF_DIGEST_SHA256},
	} {
		if f.set {
			return nil, invalid(f.name, "set on a continuation, which carries only delegation_id, turn and task")
		}
	}
	task, err := taskFromWire(w.GetTask())
	if err != nil {
		return nil, within("task", err)
	}
	c := &DelegationContinue{ID: id, Turn: w.GetTurn(), Task: task}
	return c, c.check()
}
