package delegation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/kithmesh/kith/internal/backoff"
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
	conn   *protocol.Conn  // current stream, nil between attempts
	reader *providerReader // what follows conn, nil between attempts
	// replyMu orders a Reply against the start of an attempt: an answer is
	// either in the log the attempt reads (and sent on its stream) or
	// handed to the attempt's reader, never neither.
	replyMu sync.Mutex
	// offerHash is the offer's, hashed while the offer travels and the
	// provider works (see digest).
	offerHash *digest
}

// requestGrace is how long past its timeout a requester waits for the
// provider's own expired result before giving up on it.
const requestGrace = 5 * time.Second

// Delegate starts a delegation and returns its ID once the request is
// durable. Follow it with Subscribe or Wait.
func (e *requesterHalf) Delegate(ctx context.Context, req Request) (protocol.DelegationID, error) {
	if err := protocol.CheckProfileName(req.Profile); err != nil {
		return protocol.DelegationID{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	// Too large is refused here, before anything is stored or sent: no
	// retry could make it fit.
	size := protocol.PayloadSize(req.Task.Parts)
	if size > e.maxPayload {
		return protocol.DelegationID{}, fmt.Errorf("%w: %d bytes of content, this node carries at most %d", ErrTooLarge, size, e.maxPayload)
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
		return e.prov.delegateLocal(ctx, req)
	}
	target := req.Peer
	var caps *protocol.CapabilityAssertion
	affine, holder := e.contextPeers(req.ContextID, req.Profile) // contexts: context.go
	if target == "" {
		best, a, err := e.choose(ctx, req.Profile, size, affine)
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
	if limit := caps.PayloadLimit(); size > limit {
		return protocol.DelegationID{}, fmt.Errorf("%w: %d bytes of content, provider %s carries at most %d", ErrTooLarge, size, target, limit)
	}
	// Contexts (context.go): a provider without the context's state gets its history.
	parts, err := e.carryHistory(req, target, holder, caps.PayloadLimit(), size)
	if err != nil {
		return protocol.DelegationID{}, err
	}
	req.Task.Parts = parts
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
		// The provider may pause it for input only if it knows the
		// continuation this node would answer with.
		MultiTurn: protocol.Speaks(caps.Versions, protocol.MultiTurn),
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
	// The record's write and the offer go out together: the offer is not
	// an acknowledgement of anything, and the follower reads nothing the
	// provider answers before the record is durable (created.wait). So a
	// delegation costs the requester one durable write on its critical
	// path, not two.
	cr := &created{ch: make(chan error, 1)}
	if err := e.follow(d, cr); err != nil {
		return protocol.DelegationID{}, err
	}
	err = e.create(d)
	cr.ch <- err
	if err != nil {
		return protocol.DelegationID{}, err
	}
	return offer.ID, nil
}

// created is the outcome of the write that creates a delegation, which its
// first attempt overlaps with sending the offer. A nil *created is a
// delegation already stored (one recovered at start).
type created struct {
	ch   chan error
	once sync.Once
	err  error
}

// wait returns once the delegation is stored, or why it could not be.
func (c *created) wait() error {
	if c == nil {
		return nil
	}
	c.once.Do(func() { c.err = <-c.ch })
	return c.err
}

func (e *requesterHalf) hasProfile(name string) bool {
	_, ok := e.prov.profile(name)
	return ok
}

// follow drives a remote delegation in the background until it ends: the
// offer, then reattaching after every lost stream until the deadline. cr,
// when set, is the pending write of d: the first attempt starts from d as
// it is in memory, and nothing reads or writes d in the store before cr is
// done.
func (e *requesterHalf) follow(d store.Delegation, cr *created) error {
	// The delegation is followed from now on, before the goroutine runs:
	// a Reply right after a restart finds it (and waits for the first
	// attempt to read the log, see outgoing.replyMu).
	own, cancel := context.WithCancelCause(context.Background())
	o := &outgoing{cancel: cancel, offerHash: digestOf(d.Offer)}
	e.reqMu.Lock()
	e.outgoing[d.ID] = o
	e.reqMu.Unlock()
	forget := func() {
		e.reqMu.Lock()
		if e.outgoing[d.ID] == o {
			delete(e.outgoing, d.ID)
		}
		e.reqMu.Unlock()
		cancel(nil)
	}
	err := e.goWithRun(func(ctx context.Context) {
		defer forget()
		ctx, stop := context.WithCancelCause(ctx)
		defer stop(nil)
		defer context.AfterFunc(own, func() { stop(context.Cause(own)) })()
		e.followLoop(ctx, d, o, cr)
	})
	if err != nil {
		forget()
	}
	return err
}

func (e *requesterHalf) followLoop(ctx context.Context, d store.Delegation, o *outgoing, cr *created) {
	bo := backoff.Backoff{Initial: e.cfg.ReattachBackoff, Max: maxReattachBackoff}
	preemptedBy := map[peer.ID]bool{}
	var lost *pathLoss // the provider's path went away and has not come back
	stale := false     // the last attempt's kept stream had gone
	for attempt := 0; ; attempt++ {
		fresh := attempt == 0 && cr != nil
		out, err := e.attempt(ctx, d, o, lost, fresh, cr, stale)
		if cr.wait() != nil {
			return // never stored: Delegate reports the error
		}
		stale = out == outcomeStale
		switch out {
		case outcomeDone:
			return
		case outcomeStale:
			// The provider never heard this offer on the kept stream (or
			// takes it again as a reattach): at once, on a new stream,
			// and not as a failed attempt.
			attempt--
			continue
		case outcomePreempted:
			lost = nil
			cur, err := e.st.DelegationInfo(store.RoleRequester, d.ID)
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
		case outcomeConnected:
			lost = nil // the stream worked, then broke: a new loss below
			bo.Reset()
		}
		if ctx.Err() != nil {
			return // engine stopping or cancelled: Cancel/recover take over
		}
		accepted := e.everAccepted(d.ID)
		if accepted && lost == nil {
			lost = &pathLoss{at: e.cfg.Now(), err: err}
			e.noteWaiting(d, lost)
		}
		if !e.cfg.Now().Before(d.Deadline) {
			e.expireOutgoing(d, lost)
			return
		}
		if attempt+1 >= maxUnacceptedAttempts && !accepted {
			// The provider never took the offer, so nothing runs there
			// and nothing is lost by giving up: say so now rather than
			// at the timeout.
			_, _ = e.transition(store.RoleRequester, d.ID, protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
				x.Reason = fmt.Sprintf("%s: %d attempts to reach %s failed (last: %v)", ReasonUnreachable, attempt+1, x.Peer, err)
			})
			return
		}
		if !backoff.Sleep(ctx, max(min(bo.Next(), d.Deadline.Sub(e.cfg.Now())), 0)) {
			return
		}
	}
}

// maxReattachBackoff is the longest wait between two tries to reach a
// provider: a path that comes back (a relay restarted, a direct address) is
// used within this long.
const maxReattachBackoff = 5 * time.Second

// pathLoss is when and why a requester lost its stream to a provider that
// had accepted its delegation.
type pathLoss struct {
	at  time.Time
	err error
}

// noteWaiting records, for `kith tasks show`, what a running delegation
// waits for while its provider cannot be reached.
func (e *requesterHalf) noteWaiting(d store.Delegation, l *pathLoss) {
	why := "the stream ended"
	if l.err != nil {
		why = oneLine(l.err.Error())
	}
	e.log.Info("lost the path to the provider; reattaching", "delegation", d.ID, "peer", d.Peer, "err", why)
	_, _ = e.st.UpdateDelegation(store.RoleRequester, d.ID, func(x *store.Delegation) error {
		if x.State.Terminal() {
			return nil
		}
		x.Reason = fmt.Sprintf("%s %s: lost the stream at %s (%s); reattaching until %s",
			waitingPrefix, x.Peer, l.at.UTC().Format(time.TimeOnly), why, x.Deadline.UTC().Format(time.TimeOnly))
		return nil
	})
}

// waitingPrefix starts the Reason of a live delegation whose provider is
// out of reach; a reattach clears it.
const waitingPrefix = "waiting for provider"

// oneLine keeps the first line of s, cut to a length a table can show.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// maxUnacceptedAttempts is how many times a requester tries to deliver an
// offer that no provider has accepted before it fails the delegation
// provider_unreachable (about three seconds with the default backoff).
const maxUnacceptedAttempts = 5

// everAccepted reports whether the current provider accepted d.
func (e *requesterHalf) everAccepted(id protocol.DelegationID) bool {
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
// result, and tells the provider (best effort). A provider out of reach
// since lost is named as the reason, not the clock.
func (e *requesterHalf) expireOutgoing(d store.Delegation, lost *pathLoss) {
	if _, err := e.transition(store.RoleRequester, d.ID, protocol.StateExpired, store.Event{}, func(x *store.Delegation) {
		x.Reason = ReasonTimeout
		if lost != nil {
			x.Reason = fmt.Sprintf("%s: lost the stream to %s at %s and no path came back before the deadline",
				ReasonUnreachable, x.Peer, lost.at.UTC().Format(time.TimeOnly))
		}
	}); err != nil {
		return
	}
	e.sendCancel(d.Peer, d.ID, "requester timed out")
}

// outcome is how one attempt at a provider ended.
type outcome int

const (
	outcomeRetry     outcome = iota // no stream to the provider: try again
	outcomeConnected                // a stream worked, then failed: reattach
	outcomeDone                     // the delegation is terminal here
	outcomePreempted                // the provider preempted it: offer it elsewhere
	outcomeStale                    // a kept stream had gone (streampool.go): offer again on a new one
)

// attempt opens one stream to the provider, sends the offer (or, once the
// provider has accepted, a status query to reattach), and follows the
// stream. The error says why an attempt that did not end the delegation
// failed.
//
// A fresh attempt is the first one of a delegation just offered: it starts
// from d as Delegate built it, reading nothing back, and waits for cr (the
// write of d) before it reads the provider's answer.
//
// An offer goes out on a stream kept from an earlier delegation to the same
// provider when there is one (streampool.go), unless noKept: the last
// attempt's kept stream turned out gone.
func (e *requesterHalf) attempt(ctx context.Context, d store.Delegation, o *outgoing, lost *pathLoss, fresh bool, cr *created, noKept bool) (outcome, error) {
	o.replyMu.Lock()
	locked := true
	defer func() {
		if locked {
			o.replyMu.Unlock()
		}
	}()
	cur := d
	var all []store.Event
	if !fresh {
		var err error
		if cur, err = e.st.GetDelegation(store.RoleRequester, d.ID); err != nil {
			return outcomeDone, err
		}
		if cur.State.Terminal() {
			return outcomeDone, nil
		}
		d = cur // the provider may have changed (a re-offer)
		if all, err = e.st.Events(store.RoleRequester, d.ID, 0); err != nil {
			return outcomeRetry, err
		}
	}
	r := &providerReader{e: e, d: d, offerHash: o.offerHash, statuses: rate.NewLimiter(statusRate, statusBurst)}
	r.events = slices.Clone(currentAttempt(all))
	r.moved = reoffered(all)
	for _, ev := range r.events {
		switch ev.Type {
		case EventAccepted:
			r.accepted = true
		case EventStatus:
			if m, err := protocol.DecodeMessage(ev.Data); err == nil {
				st := m.(*protocol.DelegationStatus)
				r.lastSeq = max(r.lastSeq, st.Seq)
				r.partial += protocol.PayloadSize(st.Partial)
			}
		}
	}
	var first protocol.Message
	if r.accepted {
		first = &protocol.DelegationStatus{ID: d.ID, Query: true, Seq: r.lastSeq}
	} else if e.cfg.Trace != nil {
		// Decoded for the trace only: a large offer goes out as stored.
		offer, err := protocol.DecodeMessage(cur.Offer)
		if err != nil {
			return outcomeDone, err
		}
		first = offer
	}
	var (
		s      Stream
		c      *protocol.Conn
		kept   *idleStream // the stream came from the pool
		opened time.Time   // when this attempt opened s, if it did
		err    error
	)
	if !r.accepted && !noKept {
		if is := e.idle.take(d.Peer); is != nil {
			if is.c.SendEncoded(cur.Offer) == nil {
				s, c, kept = is.s, is.c, is
				r.kept = true
			} else {
				_ = is.s.Reset()
			}
		}
	}
	if kept == nil {
		dctx, cancel := context.WithTimeout(ctx, e.cfg.Conn.IOTimeout+time.Second)
		opened = e.cfg.Now()
		s, err = e.cfg.Dialer.OpenStream(dctx, d.Peer)
		cancel()
		if err != nil {
			e.log.Debug("open stream", "peer", d.Peer, "delegation", d.ID, "err", err)
			e.idle.drop(d.Peer)
			return outcomeRetry, err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	switch {
	case kept != nil:
	case r.accepted:
		c, err = protocol.Dial(s, e.id, d.Peer, first, e.cfg.Conn)
	default:
		c, err = protocol.DialEncoded(s, e.id, d.Peer, protocol.TypeDelegationOffer, cur.Offer, e.cfg.Conn)
	}
	if err != nil {
		_ = s.Reset()
		e.idle.drop(d.Peer) // a new stream failed: free what the provider counts
		if errors.Is(err, protocol.ErrPayloadTooLarge) || errors.Is(err, protocol.ErrFrameTooLarge) {
			// A local size error: no retry can fix it.
			if cr.wait() != nil {
				return outcomeDone, err
			}
			_, _ = e.transition(store.RoleRequester, d.ID, protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
				x.Reason = ReasonPayloadTooLarge + ": " + err.Error()
			})
			return outcomeDone, err
		}
		return outcomeRetry, err
	}
	if first != nil {
		e.trace(Sent, d.Peer, first)
	}
	if lost != nil || strings.HasPrefix(cur.Reason, waitingPrefix) {
		e.log.Info("path to the provider is back", "delegation", d.ID, "peer", d.Peer)
		_, _ = e.st.UpdateDelegation(store.RoleRequester, d.ID, func(x *store.Delegation) error {
			if strings.HasPrefix(x.Reason, waitingPrefix) {
				x.Reason = ""
			}
			return nil
		})
	}
	r.c = c
	r.buf = &eventBuffer{e: e.core, id: d.ID}
	if turn := pendingTurn(r.events); r.accepted && turn != nil {
		// An answer stored while no stream was up, or whose stream broke
		// before the provider acknowledged it: the provider takes it now,
		// or knows it already and ignores it.
		if err := c.SendEncoded(turn); err != nil {
			_ = s.Reset()
			return outcomeConnected, err
		}
		r.turnSent = true
	}
	e.reqMu.Lock()
	o.conn, o.reader = c, r
	e.reqMu.Unlock()
	o.replyMu.Unlock()
	locked = false
	defer func() {
		e.reqMu.Lock()
		o.conn, o.reader = nil, nil
		e.reqMu.Unlock()
	}()
	if err := cr.wait(); err != nil {
		_ = s.Reset()
		return outcomeDone, err
	}
	// Once the result is in, the provider reads on for our next offer
	// (1.4): the stream goes back to the pool before the result is checked
	// and stored, so that it is there when Wait returns.
	r.keepStream = func() bool {
		if !stop() || !e.speaks(d.Peer, protocol.StreamReuse) {
			return false
		}
		if kept == nil {
			kept = &idleStream{s: s, c: c, born: opened}
		}
		kept.uses++
		e.idle.put(d.Peer, kept, e.cfg.Now())
		return true
	}
	out, err := r.read()
	switch {
	case r.streamKept:
	case out == outcomeDone:
		_ = s.Close() // closing our side acknowledges the result
	default:
		_ = s.Reset()
		if kept != nil && !r.heard && ctx.Err() == nil {
			return outcomeStale, err
		}
		if kept == nil && !r.heard {
			// A new stream the provider refused (its limit on a peer's
			// streams counts the kept ones): free them for the next try.
			e.idle.drop(d.Peer)
		}
	}
	return out, err
}

// keptAnswerTimeout bounds the wait for a provider's first answer to an
// offer sent on a kept stream. A provider answers within its openDelay (or
// at once, with a reject); one that has let the stream go without closing
// it (an older build reached with a capability assertion from before its
// downgrade) never does, and the offer goes again on a new stream, which
// the provider takes as new or, if it has it after all, as a reattach.
const keptAnswerTimeout = 5 * time.Second

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
	e         *requesterHalf
	d         store.Delegation
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
			_, _ = e.transitionAfter(store.RoleRequester, d.ID, r.buf.take(), protocol.StateFailed, store.Event{Type: EventRejected, Data: raw}, func(x *store.Delegation) {
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
		_, _ = e.transitionAfter(store.RoleRequester, d.ID, r.buf.take(), protocol.StateRejected, store.Event{Type: EventRejected, Data: raw}, func(x *store.Delegation) {
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
		r.streamKept = r.keepStream != nil && r.keepStream()
		e.acceptResult(d, m, raw, r.buf.take(), r.transcript(), r.moved, r.offerHash)
		return outcomeDone, nil, true
	}
	return 0, nil, false
}

func (r *providerReader) status(m *protocol.DelegationStatus, raw []byte) (out outcome, err error, end bool) {
	e, d := r.e, r.d
	if m.ID != d.ID {
		return outcomeConnected, errors.New("status for another delegation"), true
	}
	if m.State == protocol.StateUnknown {
		// The provider never stored the offer (it was lost before its
		// accept): offer again on the next attempt.
		if !r.accepted {
			return outcomeConnected, errors.New("provider does not know the offer yet"), true
		}
		_, _ = e.transitionAfter(store.RoleRequester, d.ID, r.buf.take(), protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
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
		_, _ = r.e.transition(store.RoleRequester, r.d.ID, protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
			x.Reason = ReasonStore + ": " + err.Error()
		})
		return outcomeDone, err, true
	}
	return outcomeConnected, err, true
}

// violation ends a delegation whose provider broke the protocol or its
// bounds: what was logged stays, the offending message is not kept, and
// the provider is told to stop.
func (r *providerReader) violation(reason, detail string) outcome {
	e, d := r.e, r.d
	e.log.Warn("provider violated the protocol", "delegation", d.ID, "peer", d.Peer, "reason", reason, "detail", detail)
	_, _ = e.transitionAfter(store.RoleRequester, d.ID, r.buf.take(), protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
		x.Reason = reason + ": " + detail
	})
	// On a fresh stream: this one ends now, and closing a stream the
	// provider is still writing to may drop what was last sent on it.
	e.sendCancel(d.Peer, d.ID, reason)
	return outcomeDone
}

// acceptResult verifies a provider's result (size, proof signature, offer
// hash, transcript, budget) and stores it, with the events still buffered,
// in one write. A result that fails a check is kept for inspection (unless
// it is too large to keep) but the delegation ends failed with the reason.
//
// transcript is the attempt's log, before included.
func (e *requesterHalf) acceptResult(d store.Delegation, m *protocol.DelegationResult, raw []byte, before, transcript []store.Event, moved bool, offerHash *digest) {
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

// checkProof verifies a result's proof against what this node sent and
// received: the provider's signature, the offer hash and the transcript
// (the current attempt's log). offerHash, when it hashed d.Offer, saves
// hashing it again.
func (e *requesterHalf) checkProof(d store.Delegation, m *protocol.DelegationResult, transcript []store.Event, moved bool, offerHash *digest) error {
	p, err := protocol.VerifyResultProof(d.Peer, m.Proof)
	if err != nil {
		return err
	}
	return matchProof(p, d, offerHash.sumOf(d.Offer), e.id.PeerID(), m, transcript, moved)
}

// matchProof checks a verified proof against the delegation d, whose
// offer's SHA-256 is offerSum.
func matchProof(p protocol.ResultProof, d store.Delegation, offerSum [32]byte, requester peer.ID, m *protocol.DelegationResult, events []store.Event, moved bool) error {
	switch {
	case p.DelegationID != d.ID:
		return fmt.Errorf("%w: proof names delegation %s", ErrProofInvalid, p.DelegationID)
	case p.Requester != requester:
		return fmt.Errorf("%w: proof names requester %s", ErrProofInvalid, p.Requester)
	case p.Provider != d.Peer:
		return fmt.Errorf("%w: proof names provider %s", ErrProofInvalid, p.Provider)
	case p.OfferSHA256 != offerSum:
		return fmt.Errorf("%w: offer hash differs from the offer sent", ErrProofInvalid)
	case p.TranscriptSHA256 != transcriptHash(events):
		return fmt.Errorf("%w: transcript hash differs from the messages received", ErrProofInvalid)
	case p.Usage != m.Usage:
		return fmt.Errorf("%w: proof usage %+v, result says %+v", ErrProofInvalid, p.Usage, m.Usage)
	case p.State != m.State:
		return fmt.Errorf("%w: proof state %s, result says %s", ErrProofInvalid, p.State, m.State)
	case p.Turns != proofTurns(events):
		return fmt.Errorf("%w: proof covers %d turns, this node logged %d", ErrProofInvalid, max(p.Turns, 1), max(proofTurns(events), 1))
	}
	return matchOutput(p, d, m, moved)
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
func matchOutput(p protocol.ResultProof, d store.Delegation, m *protocol.DelegationResult, moved bool) error {
	if p.OutputSHA256 == ([32]byte{}) {
		if !d.Remote || !offeredMultiTurn(d.Offer) || moved {
			return nil
		}
		return fmt.Errorf("%w: the proof binds no output (a provider speaking %s must)", ErrProofInvalid, protocol.MultiTurn)
	}
	if p.OutputSHA256 != protocol.OutputDigest(m.Output) {
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

// Cancel ends a delegation this node requested. A remote provider is told
// on the live stream, or on a new one.
func (e *requesterHalf) Cancel(id protocol.DelegationID, reason string) error {
	if reason == "" {
		reason = "cancelled by requester"
	}
	d, err := e.st.DelegationInfo(store.RoleRequester, id)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrUnknown, id)
	}
	if d.State.Terminal() {
		return fmt.Errorf("delegation %s already %s: %w", id, d.State, store.ErrTerminal)
	}
	if !d.Remote {
		e.prov.provMu.Lock()
		t := e.prov.running[id]
		e.prov.provMu.Unlock()
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
	e.reqMu.Lock()
	o := e.outgoing[id]
	var c *protocol.Conn
	if o != nil {
		c = o.conn
	}
	e.reqMu.Unlock()
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
func (e *requesterHalf) sendCancel(p peer.ID, id protocol.DelegationID, reason string) {
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
func (e *requesterHalf) reofferTarget(ctx context.Context, d store.Delegation, exclude map[peer.ID]bool) (peer.ID, bool) {
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
func (e *requesterHalf) reoffer(d store.Delegation, next peer.ID) error {
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
func (e *requesterHalf) endPreempted(d store.Delegation) {
	_, _ = e.transition(store.RoleRequester, d.ID, protocol.StatePreempted, store.Event{}, func(x *store.Delegation) {
		x.Reason = "preempted by the provider's local work; no other provider took it"
	})
}

// recoverRequester resumes the remote delegations a previous run left open
// and fails the local ones, whose executors died with the process.
func (e *requesterHalf) recoverRequester(open []store.Delegation) error {
	for _, d := range open {
		if !d.Remote && d.State == protocol.StateInputRequired {
			err := e.prov.resumeWaiting(d)
			if err == nil {
				continue
			}
			e.log.Warn("cannot resume a delegation waiting for input", "delegation", d.ID, "err", err)
		}
		if !d.Remote {
			_, _ = e.transition(store.RoleRequester, d.ID, protocol.StateFailed, store.Event{}, func(x *store.Delegation) {
				x.Reason = ReasonRequesterRestarted
			})
			continue
		}
		e.log.Info("reattaching to delegation", "delegation", d.ID, "peer", d.Peer)
		if err := e.follow(d, nil); err != nil {
			return err
		}
	}
	return nil
}

// openDelegations lists this node's delegations in role that are not over.
func (e *core) openDelegations(role store.Role) ([]store.Delegation, error) {
	return e.st.ListDelegations(store.DelegationFilter{Role: ptr(role), States: liveStates})
}
