package delegation

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Reading a provider's messages, the requester's side: a providerReader
// follows one stream, taking each reject, accept, status and result in
// view of what the provider sent before and of its bounds (status rate,
// output size), and an eventBuffer stores what it keeps in batches.

// requesterFlushDelay is how long a requester keeps the accept and
// statuses it received in memory before writing them: a fast delegation's
// result arrives first and everything lands in one write. Nothing here is
// acknowledged to anyone, so losing the buffer in a crash only makes the
// restarted requester re-offer, which the provider answers as a reattach.
const requesterFlushDelay = 25 * time.Millisecond

// requesterFlushBytes bounds what the buffer holds before it writes at
// once, so that one write stays far below the store's transaction limit
// whatever the provider streams.
const requesterFlushBytes = 256 << 10

// eventBuffer holds a requester's not-yet-stored events for one stream.
type eventBuffer struct {
	e     *core
	id    protocol.DelegationID
	cr    *created // the record's write, which every write here follows
	mu    sync.Mutex
	evs   []store.Event
	size  int
	timer *time.Timer
	done  bool  // the delegation turned terminal here meanwhile
	err   error // a write failed: what is buffered cannot be kept
}

// add buffers ev, writing the buffer at once when it is full. An error
// means the events could not be stored; the caller must end the stream
// (a reattach resumes from what the log holds).
func (b *eventBuffer) add(ev store.Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	b.evs = append(b.evs, ev)
	b.size += len(ev.Data)
	if b.size >= requesterFlushBytes {
		return b.flushLocked()
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(requesterFlushDelay, func() { _ = b.flush() })
	}
	return nil
}

// flush writes the buffered events; the last one's state becomes the
// delegation's state.
func (b *eventBuffer) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

func (b *eventBuffer) flushLocked() error {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if b.err != nil || b.done || len(b.evs) == 0 {
		return b.err
	}
	if err := b.cr.wait(); err != nil {
		b.err = err
		return err
	}
	last := b.evs[len(b.evs)-1]
	_, err := b.e.transitionAfter(store.RoleRequester, b.id, b.evs[:len(b.evs)-1], last.State, last, nil)
	switch {
	case err == nil:
	case errors.Is(err, store.ErrTerminal):
		b.done = true
	default:
		// Never drop events silently: a transcript missing them would
		// fail a good provider's proof. The stream ends and a reattach
		// asks the provider for everything after the last stored one.
		b.err = err
		return err
	}
	b.evs, b.size = nil, 0
	return nil
}

// isDone reports whether the delegation turned terminal here meanwhile.
func (b *eventBuffer) isDone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
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
	b.evs, b.size = nil, 0
	return evs
}

// Status frames a requester takes from a provider: a sustained rate and a
// burst that covers a large output sent as fast as the network allows
// (MaxPayload in statuses of statusPieceBytes, the piece size of providers
// before this one, which still send it so). Past it the delegation ends
// output_violation.
const (
	statusRate       = 50
	statusPieceBytes = 256 << 10
	statusBurst      = 64 + protocol.MaxPayload/statusPieceBytes
)

// outputCap is the most output, in bytes of part content, a provider may
// stream (and return) for a budget: generous beside the executors' own
// accounting of about four bytes per token, and never above the payload
// limit.
func (e *core) outputCap(budget uint64) int {
	const bytesPerToken, floor = 32, 64 << 10
	if budget > uint64(e.maxPayload)/bytesPerToken {
		return e.maxPayload
	}
	return min(e.maxPayload, max(floor, int(budget)*bytesPerToken))
}

// providerReader follows one stream from a provider, holding the
// requester's view of the delegation: what the provider may send next
// depends on what it sent before.
type providerReader struct {
	e *requesterHalf
	d store.Delegation
	// cr is the write that creates d's record, which the first attempt
	// overlaps (nil for a delegation recovered at start, stored already):
	// the reader takes and checks what the provider sends meanwhile, and
	// writes nothing before it is done (transitionAfter, eventBuffer,
	// acceptResult).
	cr        *created
	offerHash *digest // of the offer follow started with; checkProof uses it only for the same bytes
	c         *protocol.Conn
	buf       *eventBuffer
	accepted  bool
	lastSeq   uint64
	partial   int // bytes of partial output logged so far, every stream counted
	statuses  *rate.Limiter
	// mu guards events and turnSent, which Reply adds to.
	mu sync.Mutex
	// events is the current attempt's log, stored or buffered: what the
	// result's transcript must match, kept so that checking it reads
	// nothing back.
	events []store.Event
	// moved: the current attempt follows a re-offer (see matchOutput).
	moved bool
	// turnSent: a continuation went out on this stream, so a reject is the
	// provider refusing it, not a protocol violation.
	turnSent bool
	// kept: the offer went out on a stream kept from an earlier
	// delegation; heard: a message came on this stream.
	kept, heard bool
	// keepStream hands the stream to the pool for the next offer once the
	// result is in, and reports whether it did (streamKept): the stream is
	// then no longer this reader's.
	keepStream func() bool
	streamKept bool
	// provisional: the offer asked for provisional results and the
	// provider speaks them (1.5), so a confirmation follows the result.
	provisional bool
}

// provisionalResult takes a result that may have come before the
// provider's record of it was durable (1.5). It is checked and stored as
// any result, and its waiters hear of it once it is durable here, as
// ever: what the requester reports is the result it checked and holds.
// The provider's confirmation that it stored the result too is read
// after that (it has come by then, as a rule: the provider's write began
// before the requester's), and the stream is kept for the next offer only
// after it, the last message of this delegation on the stream.
//
// Without the confirmation (the stream ended: the provider died, or could
// not store its record), the result stands all the same: it is checked,
// signed by the provider and durable here, and what is lost is only the
// provider's record of a result it never confirmed. The node's log says
// so.
func (r *providerReader) provisionalResult(m *protocol.DelegationResult, raw []byte) (outcome, error, bool) {
	e, d := r.e, r.d
	e.acceptResult(d, m, raw, r.buf.take(), r.transcript(), r.moved, r.offerHash, r.cr)
	if r.cr.wait() != nil {
		return outcomeDone, nil, true // never stored here: Delegate said so
	}
	if !r.awaitStored(m) {
		e.log.Warn("the provider did not confirm that it stored the result; the result, checked and stored here, stands",
			"delegation", d.ID, "peer", d.Peer)
		return outcomeDone, nil, true
	}
	r.streamKept = r.keepStream != nil && r.keepStream()
	return outcomeDone, nil, true
}

// awaitStored reads the provider's confirmation that it stored res.
func (r *providerReader) awaitStored(res *protocol.DelegationResult) bool {
	m, _, err := r.c.RecvRaw(r.c.IOTimeout())
	if err != nil {
		return false
	}
	r.e.trace(Received, r.d.Peer, m)
	st, ok := m.(*protocol.DelegationStatus)
	return ok && st.Stored && st.ID == res.ID && st.State == res.State
}

// own adds a continuation this node logged and sent to the transcript.
func (r *providerReader) own(ev store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	r.turnSent = true
}

// transcript is a copy of the attempt's log so far.
func (r *providerReader) transcript() []store.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// read follows the provider's messages until the delegation is terminal
// here (outcomeDone), the provider preempted it, or the stream fails.
func (r *providerReader) read() (outcome, error) {
	e, d := r.e, r.d
	defer func() { _ = r.buf.flush() }() // a reattach reads the log to resume from
	for {
		wait := d.Deadline.Sub(e.cfg.Now())
		if wait <= 0 {
			return outcomeConnected, errors.New("deadline passed")
		}
		if r.kept && !r.heard {
			// A provider answers an offer within its openDelay; silence on
			// a kept stream means it is no longer read (see outcomeStale).
			wait = min(wait, e.keptWait)
		}
		m, raw, err := r.c.RecvRaw(wait)
		if err != nil {
			return outcomeConnected, err
		}
		r.heard = true
		e.trace(Received, d.Peer, m)
		if out, err, end := r.handle(m, raw); end {
			return out, err
		}
	}
}

// handle takes one message; end reports that the stream is over.
func (r *providerReader) handle(m protocol.Message, raw []byte) (out outcome, err error, end bool) {
	e, d := r.e, r.d
	switch m := m.(type) {
	case *protocol.DelegationReject:
		if m.ID != d.ID {
			return outcomeConnected, errors.New("reject for another delegation"), true
		}
		r.mu.Lock()
		answered := r.turnSent
		r.mu.Unlock()
		if r.accepted && answered {
			// The provider refused an answer: it no longer waits for one
			// this node can give, so the conversation is over.
			_, _ = r.transitionAfter(r.buf.take(), protocol.StateFailed, store.Event{Type: EventRejected, Data: raw}, func(x *store.Delegation) {
				x.Reason = ReasonAnswerRefused + ": " + m.Reason.String()
				if m.Detail != "" {
					x.Reason += ": " + m.Detail
				}
			})
			e.sendCancel(d.Peer, d.ID, "answer refused")
			return outcomeDone, nil, true
		}
		if r.accepted {
			return r.violation(ReasonProtocolViolation, "provider rejected a delegation it had accepted"), nil, true
		}
		_, _ = r.transitionAfter(r.buf.take(), protocol.StateRejected, store.Event{Type: EventRejected, Data: raw}, func(x *store.Delegation) {
			x.Reason = m.Reason.String()
			if m.Detail != "" {
				x.Reason += ": " + m.Detail
			}
		})
		return outcomeDone, nil, true
	case *protocol.DelegationAccept:
		if m.ID != d.ID || r.accepted {
			return 0, nil, false
		}
		r.accepted = true
		return r.keep(store.Event{Type: EventAccepted, State: protocol.StateAccepted, Data: raw})
	case *protocol.DelegationStatus:
		return r.status(m, raw)
	case *protocol.DelegationResult:
		if m.ID != d.ID {
			return outcomeConnected, errors.New("result for another delegation"), true
		}
		if !r.accepted {
			return r.violation(ReasonProtocolViolation, "provider sent a result for a delegation it never accepted"), nil, true
		}
		if r.provisional {
			return r.provisionalResult(m, raw)
		}
		r.streamKept = r.keepStream != nil && r.keepStream()
		e.acceptResult(d, m, raw, r.buf.take(), r.transcript(), r.moved, r.offerHash, r.cr)
		return outcomeDone, nil, true
	}
	return 0, nil, false
}

func (r *providerReader) status(m *protocol.DelegationStatus, raw []byte) (out outcome, err error, end bool) {
	e, d := r.e, r.d
	if m.Stored {
		// A confirmation this reader did not wait for (provisionalResult):
		// the last delegation's on a kept stream, when this node did not
		// know the provider spoke 1.5. It changes nothing here.
		return 0, nil, false
	}
	if m.ID != d.ID {
		return outcomeConnected, errors.New("status for another delegation"), true
	}
	if m.State == protocol.StateUnknown {
		// The provider never stored the offer (it was lost before its
		// accept): offer again on the next attempt.
		if !r.accepted {
			return outcomeConnected, errors.New("provider does not know the offer yet"), true
		}
		_, _ = r.transitionAfter(r.buf.take(), protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
			x.Reason = "provider does not know the delegation it accepted"
		})
		return outcomeDone, nil, true
	}
	if !r.accepted {
		return r.violation(ReasonProtocolViolation, "provider sent a status before accepting"), nil, true
	}
	if m.Seq <= r.lastSeq {
		return 0, nil, false // replayed after a reattach and already logged
	}
	if !r.statuses.Allow() {
		return r.violation(ReasonOutputViolation, fmt.Sprintf("provider sent status frames faster than %d per second", statusRate)), nil, true
	}
	n := protocol.PayloadSize(m.Partial)
	if limit := e.outputCap(d.BudgetTokens); r.partial+n > limit {
		return r.violation(ReasonOutputViolation, fmt.Sprintf("provider streamed more than %d bytes of output for a budget of %d tokens",
			limit, d.BudgetTokens)), nil, true
	}
	r.partial += n
	r.lastSeq = m.Seq
	if m.State == protocol.StatePreempted && !e.cfg.NoReoffer {
		// Log it (the delegation itself stays live) and offer the task
		// elsewhere.
		if err := r.log(store.Event{Type: EventStatus, State: protocol.StateRunning, Data: raw}); err != nil {
			return r.storeFailed(err)
		}
		return outcomePreempted, nil, true
	}
	if m.State.Terminal() && m.State != protocol.StatePreempted {
		return 0, nil, false // a terminal state comes only with a result
	}
	state := m.State
	if state == protocol.StatePreempted {
		state = protocol.StateRunning // the result ends it
	}
	if out, err, end := r.keep(store.Event{Type: EventStatus, State: state, Data: raw}); end {
		return out, err, end
	}
	if m.State != protocol.StateRunning {
		// A state change (preempted, input_required) is worth showing at
		// once; a question is waited on (Reply reads it from the log).
		if err := r.buf.flush(); err != nil {
			return r.storeFailed(err)
		}
	}
	if r.buf.isDone() {
		return outcomeDone, nil, true // cancelled or expired here meanwhile
	}
	return 0, nil, false
}

// log buffers an event for the log, and keeps it for the transcript.
func (r *providerReader) log(ev store.Event) error {
	if err := r.buf.add(ev); err != nil {
		return err
	}
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	return nil
}

// keep buffers an event for the log.
func (r *providerReader) keep(ev store.Event) (out outcome, err error, end bool) {
	if err := r.log(ev); err != nil {
		return r.storeFailed(err)
	}
	if r.buf.isDone() {
		return outcomeDone, nil, true
	}
	return 0, nil, false
}

// storeFailed ends a stream whose events could not be written. A write the
// store refuses as invalid (too large) fails the delegation, since a retry
// would meet the same refusal; anything else (a full disk, a closing store)
// ends only the stream, and a reattach resumes from the log.
func (r *providerReader) storeFailed(err error) (outcome, error, bool) {
	if errors.Is(err, store.ErrInvalid) {
		_, _ = r.transitionAfter(nil, protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
			x.Reason = ReasonStore + ": " + err.Error()
		})
		return outcomeDone, err, true
	}
	return outcomeConnected, err, true
}

// transitionAfter is e.transitionAfter on the reader's delegation, once
// its record is written (cr).
func (r *providerReader) transitionAfter(before []store.Event, to protocol.State, ev store.Event, mutate func(*store.Delegation)) (store.Delegation, error) {
	if err := r.cr.wait(); err != nil {
		return store.Delegation{}, err
	}
	return r.e.transitionAfter(store.RoleRequester, r.d.ID, before, to, ev, mutate)
}

// violation ends a delegation whose provider broke the protocol or its
// bounds: what was logged stays, the offending message is not kept, and
// the provider is told to stop.
func (r *providerReader) violation(reason, detail string) outcome {
	e, d := r.e, r.d
	e.log.Warn("provider violated the protocol", "delegation", d.ID, "peer", d.Peer, "reason", reason, "detail", detail)
	_, _ = r.transitionAfter(r.buf.take(), protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
		x.Reason = reason + ": " + detail
	})
	// On a fresh stream: this one ends now, and closing a stream the
	// provider is still writing to may drop what was last sent on it.
	e.sendCancel(d.Peer, d.ID, reason)
	return outcomeDone
}
