package delegation

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Request is what a caller asks the engine to delegate.
type Request struct {
	Profile string
	// Peer names the provider; empty lets the engine choose (a local
	// profile first, else the best discovered provider).
	Peer         peer.ID
	Task         protocol.Task
	ContextID    protocol.ContextID
	BudgetTokens uint64        // 0: the provider's maximum for the profile
	Timeout      time.Duration // 0: Config.DefaultTimeout
	Parent       protocol.DelegationID
	Priority     int32
	// HopLimit and Chain are set for child delegations by Child; callers
	// leave them zero.
	HopLimit uint32
	Chain    []peer.ID
}

// outgoing is a live remote delegation this node requested.
type outgoing struct {
	cancel context.CancelCauseFunc
	conn   *protocol.Conn // current stream, nil between attempts
}

// requestGrace is how long past its timeout a requester waits for the
// provider's own expired result before giving up on it.
const requestGrace = 5 * time.Second

// Delegate starts a delegation and returns its ID once the request is
// durable. Follow it with Subscribe or Wait.
func (e *Engine) Delegate(ctx context.Context, req Request) (protocol.DelegationID, error) {
	if err := protocol.CheckProfileName(req.Profile); err != nil {
		return protocol.DelegationID{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if req.Timeout <= 0 {
		req.Timeout = e.cfg.DefaultTimeout
	}
	req.Timeout = min(req.Timeout, e.cfg.MaxTimeout)
	if req.HopLimit == 0 {
		req.HopLimit = e.cfg.DefaultHopLimit
	}
	self := e.id.PeerID()
	if req.Peer == self || (req.Peer == "" && e.hasProfile(req.Profile)) {
		return e.delegateLocal(ctx, req)
	}
	target := req.Peer
	var caps *protocol.CapabilityAssertion
	if target == "" {
		best, a, err := e.choose(ctx, req.Profile)
		if err != nil {
			return protocol.DelegationID{}, err
		}
		target, caps = best, a
	} else {
		a, err := e.capabilities(ctx, target)
		if err != nil {
			return protocol.DelegationID{}, fmt.Errorf("delegation: capabilities of %s: %w", target, err)
		}
		caps = a
	}
	if req.BudgetTokens == 0 {
		req.BudgetTokens = 1024
		for _, p := range caps.Profiles {
			if p.Name == req.Profile && p.MaxBudgetTokens > 0 {
				req.BudgetTokens = p.MaxBudgetTokens
			}
		}
	}
	offer := &protocol.DelegationOffer{
		ID: protocol.NewDelegationID(), Profile: req.Profile, Task: req.Task, ContextID: req.ContextID,
		BudgetTokens: req.BudgetTokens, Timeout: req.Timeout, HopLimit: req.HopLimit,
		Chain: append(append([]peer.ID(nil), req.Chain...), self), Priority: req.Priority, ParentID: req.Parent,
	}
	raw, err := protocol.EncodeMessage(offer)
	if err != nil {
		return protocol.DelegationID{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	now := e.cfg.Now()
	d := store.Delegation{
		ID: offer.ID, Role: store.RoleRequester, Peer: target, Remote: true, Parent: req.Parent,
		ContextID: req.ContextID, Profile: req.Profile, State: protocol.StateOffered,
		BudgetTokens: req.BudgetTokens, Offer: raw, Deadline: now.Add(req.Timeout + requestGrace),
	}
	if err := e.st.CreateDelegation(d); err != nil {
		return protocol.DelegationID{}, err
	}
	if err := e.follow(d); err != nil {
		return offer.ID, err
	}
	return offer.ID, nil
}

func (e *Engine) hasProfile(name string) bool {
	_, ok := e.profile(name)
	return ok
}

// follow drives a remote delegation in the background until it ends: the
// offer, then reattaching after every lost stream until the deadline.
func (e *Engine) follow(d store.Delegation) error {
	return e.goWithRun(func(ctx context.Context) {
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		o := &outgoing{cancel: cancel}
		e.mu.Lock()
		e.outgoing[d.ID] = o
		e.mu.Unlock()
		defer func() {
			e.mu.Lock()
			delete(e.outgoing, d.ID)
			e.mu.Unlock()
		}()
		e.followLoop(ctx, d, o)
	})
}

func (e *Engine) followLoop(ctx context.Context, d store.Delegation, o *outgoing) {
	backoff := e.cfg.ReattachBackoff
	preemptedBy := map[peer.ID]bool{}
	for attempt := 0; ; attempt++ {
		switch e.attempt(ctx, d, o) {
		case outcomeDone:
			return
		case outcomePreempted:
			cur, err := e.st.GetDelegation(store.RoleRequester, d.ID)
			if err != nil {
				return
			}
			preemptedBy[cur.Peer] = true
			if next, ok := e.reofferTarget(ctx, cur, preemptedBy); ok {
				if err := e.reoffer(cur, next); err == nil {
					continue
				}
			}
			e.endPreempted(cur)
			return
		}
		if ctx.Err() != nil {
			return // engine stopping or cancelled: Cancel/recover take over
		}
		if !e.cfg.Now().Before(d.Deadline) {
			e.expireOutgoing(d)
			return
		}
		if attempt+1 >= maxUnacceptedAttempts && !e.everAccepted(d.ID) {
			// The provider never took the offer, so nothing runs there
			// and nothing is lost by giving up: say so now rather than
			// at the timeout.
			_, _ = e.transition(store.RoleRequester, d.ID, protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
				x.Reason = fmt.Sprintf("%s: %d attempts to reach %s failed", ReasonUnreachable, attempt+1, x.Peer)
			})
			return
		}
		wait := min(backoff, d.Deadline.Sub(e.cfg.Now()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, 0)):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// maxUnacceptedAttempts is how many times a requester tries to deliver an
// offer that no provider has accepted before it fails the delegation
// provider_unreachable (about three seconds with the default backoff).
const maxUnacceptedAttempts = 5

// everAccepted reports whether the current provider accepted d.
func (e *Engine) everAccepted(id protocol.DelegationID) bool {
	evs, err := e.st.Events(store.RoleRequester, id, 0)
	if err != nil {
		return true // unsure: keep trying until the deadline
	}
	for _, ev := range currentAttempt(evs) {
		if ev.Type == EventAccepted {
			return true
		}
	}
	return false
}

// expireOutgoing gives up on a delegation whose deadline passed with no
// result, and tells the provider (best effort).
func (e *Engine) expireOutgoing(d store.Delegation) {
	if _, err := e.transition(store.RoleRequester, d.ID, protocol.StateExpired, store.Event{}, func(x *store.Delegation) {
		x.Reason = ReasonTimeout
	}); err != nil {
		return
	}
	e.sendCancel(d.Peer, d.ID, "requester timed out")
}

// outcome is how one attempt at a provider ended.
type outcome int

const (
	outcomeRetry     outcome = iota // the stream failed: reattach
	outcomeDone                     // the delegation is terminal here
	outcomePreempted                // the provider preempted it: offer it elsewhere
)

// attempt opens one stream to the provider, sends the offer (or, once the
// provider has accepted, a status query to reattach), and follows the
// stream.
func (e *Engine) attempt(ctx context.Context, d store.Delegation, o *outgoing) outcome {
	cur, err := e.st.GetDelegation(store.RoleRequester, d.ID)
	if err != nil {
		return outcomeDone
	}
	if cur.State.Terminal() {
		return outcomeDone
	}
	d = cur // the provider may have changed (a re-offer)
	all, err := e.st.Events(store.RoleRequester, d.ID, 0)
	if err != nil {
		return outcomeRetry
	}
	events := currentAttempt(all)
	var first protocol.Message
	var lastSeq uint64
	accepted := false
	for _, ev := range events {
		switch ev.Type {
		case EventAccepted:
			accepted = true
		case EventStatus:
			if m, err := protocol.DecodeMessage(ev.Data); err == nil {
				lastSeq = max(lastSeq, m.(*protocol.DelegationStatus).Seq)
			}
		}
	}
	if accepted {
		first = &protocol.DelegationStatus{ID: d.ID, Query: true, Seq: lastSeq}
	} else {
		offer, err := protocol.DecodeMessage(cur.Offer)
		if err != nil {
			return outcomeDone
		}
		first = offer
	}
	dctx, cancel := context.WithTimeout(ctx, e.cfg.Conn.IOTimeout+time.Second)
	s, err := e.cfg.Dialer.OpenStream(dctx, d.Peer)
	cancel()
	if err != nil {
		e.log.Debug("open stream", "peer", d.Peer, "delegation", d.ID, "err", err)
		return outcomeRetry
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	var c *protocol.Conn
	if accepted {
		c, err = protocol.Dial(s, e.id, d.Peer, first, e.cfg.Conn)
	} else {
		c, err = protocol.DialEncoded(s, e.id, d.Peer, first.Type(), cur.Offer, e.cfg.Conn)
	}
	if err != nil {
		_ = s.Reset()
		return outcomeRetry
	}
	e.trace(Sent, d.Peer, first)
	e.mu.Lock()
	o.conn = c
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		o.conn = nil
		e.mu.Unlock()
	}()
	out := e.readProvider(c, cur, accepted, lastSeq)
	if out == outcomeDone {
		_ = s.Close() // closing our side acknowledges the result
	} else {
		_ = s.Reset()
	}
	return out
}

// requesterFlushDelay is how long a requester keeps the accept and
// statuses it received in memory before writing them: a fast delegation's
// result arrives first and everything lands in one write. Nothing here is
// acknowledged to anyone, so losing the buffer in a crash only makes the
// restarted requester re-offer, which the provider answers as a reattach.
const requesterFlushDelay = 25 * time.Millisecond

// eventBuffer holds a requester's not-yet-stored events for one stream.
type eventBuffer struct {
	e     *Engine
	id    protocol.DelegationID
	mu    sync.Mutex
	evs   []store.Event
	timer *time.Timer
	done  bool // the delegation turned terminal here meanwhile
}

func (b *eventBuffer) add(ev store.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.evs = append(b.evs, ev)
	if b.timer == nil {
		b.timer = time.AfterFunc(requesterFlushDelay, func() { b.flush() })
	}
}

// flush writes the buffered events; the last one's state becomes the
// delegation's state. It reports false once the delegation is terminal.
func (b *eventBuffer) flush() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.evs) == 0 || b.done {
		return !b.done
	}
	last := b.evs[len(b.evs)-1]
	_, err := b.e.transitionAfter(store.RoleRequester, b.id, b.evs[:len(b.evs)-1], last.State, last, nil)
	b.evs = nil
	if errors.Is(err, store.ErrTerminal) {
		b.done = true
	}
	return !b.done
}

// take hands the buffered events to the caller, who stores them with the
// result.
func (b *eventBuffer) take() []store.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	evs := b.evs
	b.evs = nil
	return evs
}

// readProvider follows the provider's messages on one stream. It reports
// true once the delegation is terminal here.
func (e *Engine) readProvider(c *protocol.Conn, d store.Delegation, accepted bool, lastSeq uint64) outcome {
	buf := &eventBuffer{e: e, id: d.ID}
	defer buf.flush() // a reattach reads the log to resume from
	for {
		wait := d.Deadline.Sub(e.cfg.Now())
		if wait <= 0 {
			return outcomeRetry
		}
		m, raw, err := c.RecvRaw(wait)
		if err != nil {
			return outcomeRetry
		}
		e.trace(Received, d.Peer, m)
		switch m := m.(type) {
		case *protocol.DelegationReject:
			if m.ID != d.ID {
				return outcomeRetry
			}
			_, _ = e.transitionAfter(store.RoleRequester, d.ID, buf.take(), protocol.StateRejected, store.Event{Type: EventRejected, Data: raw}, func(x *store.Delegation) {
				x.Reason = m.Reason.String()
				if m.Detail != "" {
					x.Reason += ": " + m.Detail
				}
			})
			return outcomeDone
		case *protocol.DelegationAccept:
			if m.ID != d.ID || accepted {
				continue
			}
			accepted = true
			buf.add(store.Event{Type: EventAccepted, State: protocol.StateAccepted, Data: raw})
		case *protocol.DelegationStatus:
			if m.ID != d.ID {
				return outcomeRetry
			}
			if m.State == protocol.StateUnknown {
				// The provider never stored the offer (it was lost
				// before its accept): offer again on the next attempt.
				if !accepted {
					return outcomeRetry
				}
				_, _ = e.transitionAfter(store.RoleRequester, d.ID, buf.take(), protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
					x.Reason = "provider does not know the delegation it accepted"
				})
				return outcomeDone
			}
			if m.Seq <= lastSeq {
				continue // replayed after a reattach and already logged
			}
			lastSeq = m.Seq
			if m.State == protocol.StatePreempted && !e.cfg.NoReoffer {
				// Log it (the delegation itself stays live) and offer
				// the task elsewhere.
				buf.add(store.Event{Type: EventStatus, State: protocol.StateRunning, Data: raw})
				return outcomePreempted
			}
			if m.State.Terminal() && m.State != protocol.StatePreempted {
				continue // a terminal state comes only with a result
			}
			state := m.State
			if state == protocol.StatePreempted {
				state = protocol.StateRunning // the result ends it
			}
			buf.add(store.Event{Type: EventStatus, State: state, Data: raw})
			if !buf.done && len(m.Partial) == 0 && m.State != protocol.StateRunning {
				// A state change (preempted, input_required) is worth
				// showing at once.
				buf.flush()
			}
			if buf.done {
				return outcomeDone // cancelled or expired here meanwhile
			}
		case *protocol.DelegationResult:
			if m.ID != d.ID {
				return outcomeRetry
			}
			e.acceptResult(d, m, raw, buf.take())
			return outcomeDone
		}
	}
}

// acceptResult verifies a provider's result (proof signature, offer hash,
// transcript, budget) and stores it, with the events still buffered, in one
// write. A result that fails a check is kept for inspection but the
// delegation ends failed with the reason.
func (e *Engine) acceptResult(d store.Delegation, m *protocol.DelegationResult, raw []byte, before []store.Event) {
	state, reason := m.State, m.Reason
	if err := e.checkProof(d, m, before); err != nil {
		state, reason = protocol.StateFailed, ReasonProofInvalid+": "+err.Error()
	} else if m.Usage.Completion > d.BudgetTokens {
		state = protocol.StateFailed
		reason = fmt.Sprintf("%s: provider reported %d completion tokens, budget was %d", ReasonBudgetViolation, m.Usage.Completion, d.BudgetTokens)
	}
	if !state.Terminal() {
		state, reason = protocol.StateFailed, "provider sent a result with non-terminal state "+m.State.String()
	}
	_, _ = e.transitionAfter(store.RoleRequester, d.ID, before, state, store.Event{Type: EventResult, Data: raw}, func(x *store.Delegation) {
		x.Result = raw
		x.Reason = reason
		x.Usage = store.Usage(m.Usage)
	})
}

// checkProof verifies a result's proof against what this node sent and
// received: the provider's signature, the offer hash and the transcript.
func (e *Engine) checkProof(d store.Delegation, m *protocol.DelegationResult, pending []store.Event) error {
	p, err := protocol.VerifyResultProof(d.Peer, m.Proof)
	if err != nil {
		return err
	}
	events, err := e.st.Events(store.RoleRequester, d.ID, 0)
	if err != nil {
		return err
	}
	events = append(events, pending...)
	return matchProof(p, d, e.id.PeerID(), m, events)
}

func matchProof(p protocol.ResultProof, d store.Delegation, requester peer.ID, m *protocol.DelegationResult, events []store.Event) error {
	switch {
	case p.DelegationID != d.ID:
		return fmt.Errorf("%w: proof names delegation %s", ErrProofInvalid, p.DelegationID)
	case p.Requester != requester:
		return fmt.Errorf("%w: proof names requester %s", ErrProofInvalid, p.Requester)
	case p.Provider != d.Peer:
		return fmt.Errorf("%w: proof names provider %s", ErrProofInvalid, p.Provider)
	case p.OfferSHA256 != sha256.Sum256(d.Offer):
		return fmt.Errorf("%w: offer hash differs from the offer sent", ErrProofInvalid)
	case p.TranscriptSHA256 != transcriptHash(events):
		return fmt.Errorf("%w: transcript hash differs from the messages received", ErrProofInvalid)
	case p.Usage != m.Usage:
		return fmt.Errorf("%w: proof usage %+v, result says %+v", ErrProofInvalid, p.Usage, m.Usage)
	case p.State != m.State:
		return fmt.Errorf("%w: proof state %s, result says %s", ErrProofInvalid, p.State, m.State)
	}
	return nil
}

// Cancel ends a delegation this node requested. A remote provider is told
// on the live stream, or on a new one.
func (e *Engine) Cancel(id protocol.DelegationID, reason string) error {
	if reason == "" {
		reason = "cancelled by requester"
	}
	d, err := e.st.GetDelegation(store.RoleRequester, id)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrUnknown, id)
	}
	if d.State.Terminal() {
		return fmt.Errorf("delegation %s already %s: %w", id, d.State, store.ErrTerminal)
	}
	if !d.Remote {
		e.mu.Lock()
		t := e.running[id]
		e.mu.Unlock()
		if t != nil {
			t.cancel(&stopCause{protocol.StateCancelled, reason})
			<-t.done
			return nil
		}
	}
	_, err = e.transition(store.RoleRequester, id, protocol.StateCancelled, store.Event{Type: EventCancel}, func(x *store.Delegation) { x.Reason = reason })
	if err != nil {
		return err
	}
	e.mu.Lock()
	o := e.outgoing[id]
	var c *protocol.Conn
	if o != nil {
		c = o.conn
	}
	e.mu.Unlock()
	if c != nil && c.Send(&protocol.DelegationCancel{ID: id, Reason: reason}) == nil {
		e.trace(Sent, d.Peer, &protocol.DelegationCancel{ID: id, Reason: reason})
	} else if d.Remote {
		e.sendCancel(d.Peer, id, reason)
	}
	if o != nil {
		// Let the live stream carry the provider's cancelled result (which
		// then meets our terminal state and is dropped) before giving up
		// on it: resetting at once could drop the cancel in flight.
		time.AfterFunc(e.cfg.Conn.IOTimeout, func() { o.cancel(errors.New("cancelled")) })
	}
	return nil
}

// sendCancel tells a provider on a fresh stream, in the background.
func (e *Engine) sendCancel(p peer.ID, id protocol.DelegationID, reason string) {
	_ = e.goWithRun(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, e.cfg.Conn.IOTimeout+time.Second)
		defer cancel()
		s, err := e.cfg.Dialer.OpenStream(ctx, p)
		if err != nil {
			return
		}
		m := &protocol.DelegationCancel{ID: id, Reason: reason}
		if _, err := protocol.Dial(s, e.id, p, m, e.cfg.Conn); err != nil {
			_ = s.Reset()
			return
		}
		e.trace(Sent, p, m)
		_ = s.Close()
	})
}

// reofferTarget picks another provider of d's profile, not one that has
// preempted it.
func (e *Engine) reofferTarget(ctx context.Context, d store.Delegation, exclude map[peer.ID]bool) (peer.ID, bool) {
	if e.cfg.NoReoffer || e.cfg.Finder == nil {
		return "", false
	}
	for _, p := range e.cfg.Finder.Candidates(ctx, d.Profile) {
		if p == e.id.PeerID() || exclude[p] {
			continue
		}
		a, err := e.capabilities(ctx, p)
		if err != nil {
			continue
		}
		for _, pr := range a.Profiles {
			if pr.Name == d.Profile && a.Capacity.FreeSlots > 0 && (pr.MaxBudgetTokens == 0 || pr.MaxBudgetTokens >= d.BudgetTokens) {
				return p, true
			}
		}
	}
	return "", false
}

// reoffer moves a preempted delegation to provider next: the log marks
// where the new attempt starts, and the same offer goes out again.
func (e *Engine) reoffer(d store.Delegation, next peer.ID) error {
	if _, err := e.st.UpdateDelegation(store.RoleRequester, d.ID, func(x *store.Delegation) error {
		x.Peer = next
		return nil
	}); err != nil {
		return err
	}
	e.log.Info("re-offering preempted delegation", "delegation", d.ID, "from", d.Peer, "to", next)
	return e.appendEvent(store.RoleRequester, d.ID, store.Event{Type: EventReoffer, State: d.State,
		Data: []byte(fmt.Sprintf("preempted by %s; offered to %s", d.Peer, next))})
}

// endPreempted ends a delegation that no other provider could take over.
func (e *Engine) endPreempted(d store.Delegation) {
	_, _ = e.transition(store.RoleRequester, d.ID, protocol.StatePreempted, store.Event{}, func(x *store.Delegation) {
		x.Reason = "preempted by the provider's local work; no other provider took it"
	})
}

// recoverRequester resumes the remote delegations a previous run left open
// and fails the local ones, whose executors died with the process.
func (e *Engine) recoverRequester() error {
	open, err := e.st.ListDelegations(store.DelegationFilter{Role: ptr(store.RoleRequester), States: liveStates})
	if err != nil {
		return err
	}
	for _, d := range open {
		if !d.Remote {
			_, _ = e.transition(store.RoleRequester, d.ID, protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
				x.Reason = ReasonRequesterRestarted
			})
			continue
		}
		e.log.Info("reattaching to delegation", "delegation", d.ID, "peer", d.Peer)
		if err := e.follow(d); err != nil {
			return err
		}
	}
	return nil
}

// recover runs both recoveries at start.
func (e *Engine) recover(context.Context) error {
	return errors.Join(e.recoverProvider(), e.recoverRequester())
}
