package protocol

import (
	"time"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

// DelegationStatus reports where a delegation stands. From the provider it
// carries state, progress and partial output. From the requester, with
// Query set and nothing else but ID, it asks the provider to report (to
// reattach after a lost stream); a provider that does not know the ID
// answers with StateUnknown.
type DelegationStatus struct {
	ID               DelegationID
	State            State
	ProgressPermille uint32 // 0..MaxProgressPermille
	Partial          []Part // output produced since the previous status
	Seq              uint64 // increases with every status of one delegation
	Query            bool
	Reason           string // why the state changed (e.g. preempted), for people
	// Turn (1.3) is the turn of a multi-turn delegation the status belongs
	// to, from 1; 0 when the offer was not multi_turn. A status of state
	// input_required ends its turn: Partial is then the question, not
	// output, and Usage what the conversation has used so far.
	Turn  uint32
	Usage Usage
	// Stored (1.5) confirms a result sent to an offer with
	// ProvisionalResult: the provider's record of the delegation, the
	// result included, is durable. Such a status carries the result's
	// state, its ID and Seq, and nothing else.
	Stored bool
}

// DelegationResult is the provider's final word on a delegation.
type DelegationResult struct {
	ID       DelegationID
	State    State // terminal
	Output   []Part
	Usage    Usage
	Duration time.Duration // whole milliseconds on the wire
	// Proof is a signed ResultProof (see SignResultProof); the zero value
	// means none was sent.
	Proof  crypto.Assertion
	Reason string
}

// Usage counts the tokens a delegation used.
type Usage struct {
	Prompt     uint64
	Completion uint64
	Total      uint64
}

func (*DelegationStatus) Type() MessageType { return TypeDelegationStatus }
func (*DelegationResult) Type() MessageType { return TypeDelegationResult }

func (s *DelegationStatus) check() error {
	if err := checkDelegationID("delegation_id", s.ID); err != nil {
		return err
	}
	if err := checkState("state", s.State); err != nil {
		return err
	}
	if s.ProgressPermille > MaxProgressPermille {
		return invalid("progress_permille", "%d, limit %d", s.ProgressPermille, MaxProgressPermille)
	}
	if err := checkParts("partial", s.Partial); err != nil {
		return err
	}
	if s.Turn > MaxTurns {
		return invalid("turn", "%d, limit %d", s.Turn, MaxTurns)
	}
	if s.Query && (s.State != StateUnknown || s.ProgressPermille != 0 || len(s.Partial) > 0 || s.Turn != 0 || s.Usage != (Usage{})) {
		// A query that also claims a state would be ambiguous about who
		// is reporting to whom.
		return invalid("query", "a status query carries no state, progress or output")
	}
	if s.Stored && (s.Query || !s.State.Terminal() || s.ProgressPermille != 0 || len(s.Partial) > 0 || s.Turn != 0 || s.Usage != (Usage{}) || s.Reason != "") {
		return invalid("stored", "a stored confirmation carries the result's terminal state and nothing else")
	}
	return checkLen("reason", s.Reason, MaxReasonLen)
}

func (s *DelegationStatus) toWire() (*pb.DelegationStatus, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return &pb.DelegationStatus{
		DelegationId:     s.ID[:],
		State:            stateToWire(s.State),
		ProgressPermille: s.ProgressPermille,
		Partial:          partsToWire(s.Partial),
		Seq:              s.Seq,
		Query:            s.Query,
		Reason:           s.Reason,
		Turn:             s.Turn,
		Usage:            usageToWire(s.Usage),
		Stored:           s.Stored,
	}, nil
}

func delegationStatusFromWire(w *pb.DelegationStatus) (*DelegationStatus, error) {
	id, err := delegationIDFromWire("delegation_id", w.GetDelegationId())
	if err != nil {
		return nil, err
	}
	state, err := stateFromWire("state", w.GetState())
	if err != nil {
		return nil, err
	}
	partial, err := partsFromWire("partial", w.GetPartial())
	if err != nil {
		return nil, err
	}
	s := &DelegationStatus{
		ID:               id,
		State:            state,
		ProgressPermille: w.GetProgressPermille(),
		Partial:          partial,
		Seq:              w.GetSeq(),
		Query:            w.GetQuery(),
		Reason:           w.GetReason(),
		Turn:             w.GetTurn(),
		Usage:            usageFromWire(w.GetUsage()),
		Stored:           w.GetStored(),
	}
	return s, s.check()
}

func (r *DelegationResult) check() error {
	if err := checkDelegationID("delegation_id", r.ID); err != nil {
		return err
	}
	if err := checkState("state", r.State); err != nil {
		return err
	}
	if !r.State.Terminal() {
		return invalid("state", "%s is not a terminal state", r.State)
	}
	if err := checkParts("output", r.Output); err != nil {
		return err
	}
	if _, err := durationToWire("duration_ms", r.Duration); err != nil {
		return err
	}
	if len(r.Proof.Payload) > 0 || len(r.Proof.Signature) > 0 {
		if err := checkAssertion("proof", r.Proof); err != nil {
			return err
		}
	}
	return checkLen("reason", r.Reason, MaxReasonLen)
}

func (r *DelegationResult) toWire() (*pb.DelegationResult, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	duration, _ := durationToWire("duration_ms", r.Duration) // checked above
	return &pb.DelegationResult{
		DelegationId: r.ID[:],
		State:        stateToWire(r.State),
		Output:       partsToWire(r.Output),
		Usage:        usageToWire(r.Usage),
		DurationMs:   duration,
		Proof:        assertionToWire(r.Proof),
		Reason:       r.Reason,
	}, nil
}

func delegationResultFromWire(w *pb.DelegationResult) (*DelegationResult, error) {
	id, err := delegationIDFromWire("delegation_id", w.GetDelegationId())
	if err != nil {
		return nil, err
	}
	state, err := stateFromWire("state", w.GetState())
	if err != nil {
		return nil, err
	}
	output, err := partsFromWire("output", w.GetOutput())
	if err != nil {
		return nil, err
	}
	r := &DelegationResult{
		ID:       id,
		State:    state,
		Output:   output,
		Usage:    usageFromWire(w.GetUsage()),
		Duration: durationFromWire(w.GetDurationMs()),
		Proof:    assertionFromWire(w.GetProof()),
		Reason:   w.GetReason(),
	}
	return r, r.check()
}

func usageToWire(u Usage) *pb.Usage {
	if u == (Usage{}) {
		return nil
	}
	return &pb.Usage{Prompt: u.Prompt, Completion: u.Completion, Total: u.Total}
}

func usageFromWire(w *pb.Usage) Usage {
	return Usage{Prompt: w.GetPrompt(), Completion: w.GetCompletion(), Total: w.GetTotal()}
}
