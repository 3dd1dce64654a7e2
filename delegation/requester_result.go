package delegation

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// A provider's result, the requester's side: its checks (size, budget, the
// signed proof against the offer, the transcript and the output) and the
// write that stores it.

// acceptResult verifies a provider's result (size, proof signature, offer
// hash, transcript, budget) and stores it, with the events still buffered,
// in one write. A result that fails a check is kept for inspection (unless
// it is too large to keep) but the delegation ends failed with the reason.
//
// transcript is the attempt's log, before included. cr, when set, is the
// write that creates d's record: the result is checked while it goes on,
// and stored after it (nowhere, if it failed: Delegate said so); or, when
// no one has claimed that write yet, stored with the record in one write.
func (e *requesterHalf) acceptResult(d store.Delegation, m *protocol.DelegationResult, raw []byte, before, transcript []store.Event, moved bool, offerHash *digest, cr *created) {
	state, reason := m.State, m.Reason
	keep := raw
	if n, limit := protocol.PayloadSize(m.Output), e.outputCap(d.BudgetTokens); n > limit {
		state, keep = protocol.StateFailed, nil
		reason = fmt.Sprintf("%s: result of %d bytes, at most %d for a budget of %d tokens", ReasonOutputViolation, n, limit, d.BudgetTokens)
	} else {
		// Its file is written while the proof is checked: the result is
		// kept whatever the verdict (store/stage.go).
		e.st.StageResult(store.RoleRequester, d.ID, raw)
		defer e.st.DropStaged(store.RoleRequester, d.ID)
		if err := e.checkProof(d, m, transcript, moved, offerHash); err != nil {
			state, reason = protocol.StateFailed, ReasonProofInvalid+": "+err.Error()
		} else if m.Usage.Completion > d.BudgetTokens {
			state = protocol.StateFailed
			reason = fmt.Sprintf("%s: provider reported %d completion tokens, budget was %d", ReasonBudgetViolation, m.Usage.Completion, d.BudgetTokens)
		}
	}
	if !state.Terminal() {
		state, reason = protocol.StateFailed, "provider sent a result with non-terminal state "+m.State.String()
	}
	if cr != nil {
		e.noteAnswer(d.Peer, d.Profile, e.cfg.Now().Sub(cr.at) <= e.createDelay)
		if cr.claim() {
			e.createWithResult(cr, state, keep, reason, m.Usage, before)
			return
		}
	}
	if cr.wait() != nil {
		return
	}
	// The log's result event carries no copy of the result: it is the
	// delegation's Result, stored once.
	_, err := e.transitionAfter(store.RoleRequester, d.ID, before, state, store.Event{Type: EventResult}, func(x *store.Delegation) {
		x.Result = keep
		x.Reason = reason
		x.Usage = store.Usage(m.Usage)
	})
	if err != nil && !errors.Is(err, store.ErrTerminal) {
		e.log.Error("store result", "delegation", d.ID, "err", err)
		_, _ = e.transition(store.RoleRequester, d.ID, protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
			x.Reason = ReasonStore + ": " + err.Error()
		})
	}
}

// createWithResult writes a delegation's record with its checked result:
// one write, where creating the record and then storing the result take
// two. The record, its log and what subscribers hear are those the two
// writes make (TestResultWithRecord), and cr reports the write to
// Delegate, which returns once it is durable.
func (e *requesterHalf) createWithResult(cr *created, state protocol.State, result []byte, reason string, usage protocol.Usage, before []store.Event) {
	// Times as the store returns them: UTC, without a monotonic reading.
	stored := func(t time.Time) time.Time { return t.Round(0).UTC() }
	now := stored(e.cfg.Now())
	d := cr.d
	d.State, d.Result, d.Reason, d.Usage = state, result, reason, store.Usage(usage)
	d.CreatedAt, d.UpdatedAt, d.Deadline = stored(cr.at), now, stored(d.Deadline)
	evs := make([]store.Event, 0, len(before)+1)
	for _, ev := range before {
		if ev.At.IsZero() {
			ev.At = now
		}
		evs = append(evs, ev)
	}
	evs = append(evs, store.Event{Type: EventResult, State: state, At: now})
	err := e.createRecord(d, evs...)
	if err == nil {
		e.publishNew(store.RoleRequester, d.ID, 1, evs)
		// Kept before Delegate returns, so that the caller's Wait finds it.
		d.Offer, d.LastSeq = nil, uint64(len(evs)) // as Wait's reads return it
		e.keepFinal(&d)
	}
	cr.done(err) // Delegate reports an error
}

// checkProof verifies a result's proof against what this node sent and
// received: the provider's signature, the offer hash and the transcript
// (the current attempt's log). offerHash, when it hashed d.Offer, saves
// hashing it again.
func (e *requesterHalf) checkProof(d store.Delegation, m *protocol.DelegationResult, transcript []store.Event, moved bool, offerHash *digest) error {
	p, err := protocol.VerifyResultProof(d.Peer, m.Proof)
	if err != nil {
		return err
	}
	// The two hashes run side by side, the offer's on a goroutine of its
	// own (begun in the background once the offer was out, it may be
	// done), while the result's file is written (acceptResult).
	if offerHash.hashes(p.Digest, d.Offer) {
		offerHash.begin()
	}
	outSum := outputSum(p, m)
	return matchProof(p, d, offerHash.sumOf(p.Digest, d.Offer), outSum, e.id.PeerID(), m, transcript, moved)
}

// outputSum is the digest of m's output when the proof binds one, and zero
// when it binds none: there is nothing to compare it with then.
func outputSum(p protocol.ResultProof, m *protocol.DelegationResult) [32]byte {
	if p.OutputHash == ([32]byte{}) {
		return [32]byte{}
	}
	return protocol.OutputDigest(p.Digest, m.Output)
}

// matchProof checks a verified proof against the delegation d, whose
// offer's digest (made with p.Digest) is offerSum; outSum is
// outputSum(p, m).
func matchProof(p protocol.ResultProof, d store.Delegation, offerSum, outSum [32]byte, requester peer.ID, m *protocol.DelegationResult, events []store.Event, moved bool) error {
	switch {
	case p.DelegationID != d.ID:
		return fmt.Errorf("%w: proof names delegation %s", ErrProofInvalid, p.DelegationID)
	case p.Requester != requester:
		return fmt.Errorf("%w: proof names requester %s", ErrProofInvalid, p.Requester)
	case p.Provider != d.Peer:
		return fmt.Errorf("%w: proof names provider %s", ErrProofInvalid, p.Provider)
	case p.OfferHash != offerSum:
		return fmt.Errorf("%w: offer hash differs from the offer sent", ErrProofInvalid)
	case p.TranscriptHash != transcriptHash(p.Digest, events):
		return fmt.Errorf("%w: transcript hash differs from the messages received", ErrProofInvalid)
	case p.Usage != m.Usage:
		return fmt.Errorf("%w: proof usage %+v, result says %+v", ErrProofInvalid, p.Usage, m.Usage)
	case p.State != m.State:
		return fmt.Errorf("%w: proof state %s, result says %s", ErrProofInvalid, p.State, m.State)
	case p.Turns != proofTurns(events):
		return fmt.Errorf("%w: proof covers %d turns, this node logged %d", ErrProofInvalid, max(p.Turns, 1), max(proofTurns(events), 1))
	}
	return matchOutput(p, d, outSum, moved)
}

// matchOutput checks that the proof binds the result's output. A provider
// known to speak 1.3 must sign its digest: the one this node offered the
// task multi_turn (which it does only for one that advertises 1.3). An
// older provider signs none, and its output is covered only as far as it
// streamed it (the transcript); so is the output of a provider that took
// the task over after a preemption (the same offer goes out again, and that
// provider may be older), and of this node's own local delegations stored
// by a version before 1.3 (this node signs the digest now, and is checked
// against it whenever it did).
func matchOutput(p protocol.ResultProof, d store.Delegation, outSum [32]byte, moved bool) error {
	if p.OutputHash == ([32]byte{}) {
		if !d.Remote || !offeredMultiTurn(d.Offer) || moved {
			return nil
		}
		return fmt.Errorf("%w: the proof binds no output (a provider speaking %s must)", ErrProofInvalid, protocol.MultiTurn)
	}
	if p.OutputHash != outSum {
		return fmt.Errorf("%w: output differs from the output the provider signed", ErrProofInvalid)
	}
	return nil
}

// reoffered reports whether the log's current attempt follows a re-offer.
func reoffered(events []store.Event) bool {
	return slices.ContainsFunc(events, func(ev store.Event) bool { return ev.Type == EventReoffer })
}

// offeredMultiTurn reports whether the stored offer was marked multi_turn,
// which this node does only for a provider that speaks 1.3.
func offeredMultiTurn(raw []byte) bool {
	m, err := protocol.DecodeMessage(raw)
	if err != nil {
		return false
	}
	o, ok := m.(*protocol.DelegationOffer)
	return ok && o.MultiTurn
}
