package delegation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

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
// durable. Follow it with Subscribe or Wait. To a provider that answers
// fast (answersFast) it may return up to createDelay later, once the
// request is durable with its result.
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
		// Its result may come while the provider's write of it syncs,
		// confirmed once durable (protocol/doc.go, Provisional results).
		ProvisionalResult: protocol.Speaks(caps.Versions, protocol.ProvisionalResults),
		// The proof may be made with the hash this node makes fastest
		// (protocol.FastestDigest); the provider agrees if it too makes
		// that one fastest.
		ProofDigest: e.askDigest(caps),
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
	// an acknowledgement of anything, and the follower writes nothing of
	// what the provider answers before the record is durable
	// (created.wait); it reads and checks it meanwhile. So a delegation
	// costs the requester one durable write on its critical path before
	// the result's, and the result's checks overlap that one.
	//
	// A provider that answered this profile's last offer within
	// createDelay is given that long to answer this one before the record
	// is written alone: a result that comes first is written with the
	// record, one write instead of two (acceptResult). Only when the write
	// would wait for the disk alone: a store that does not sync saves
	// microseconds, and under load writes share a batch's sync, and a
	// record held back 5 ms for an answer that comes later holds back the
	// result's write behind it.
	cr := newCreated(e, d, now)
	merge := e.st.Syncs() && e.st.Quiet() && e.answersFast(target, req.Profile)
	if merge {
		// Its file, if it has one, is written while the offer travels.
		e.st.StageOffer(store.RoleRequester, d.ID, d.Offer)
	} else {
		cr.claim() // the record is written alone, below, whenever the answer comes
	}
	if err := e.follow(d, cr); err != nil {
		e.st.DropStaged(store.RoleRequester, d.ID)
		return protocol.DelegationID{}, err
	}
	if !merge {
		cr.done(e.createRecord(d))
	} else {
		t := time.NewTimer(e.createDelay)
		select {
		case <-cr.written:
		case <-t.C:
			if cr.writeAlone() { // no answer yet
				e.noteAnswer(target, req.Profile, false)
			}
		case <-ctx.Done(): // the caller stops waiting: the record is written now
		}
		t.Stop()
	}
	if err := cr.wait(); err != nil {
		return protocol.DelegationID{}, err
	}
	return offer.ID, nil
}

// createDelay is how long Delegate waits for the answer of a provider that
// answers fast (answersFast) before it writes the delegation's record
// alone. A result that comes sooner is written with the record, in one
// write: a short delegation then costs the requester one durable write,
// not two. The price: Delegate returns createDelay later when such a
// provider is slow this time (once: the next offer to it does not wait),
// and a requester that crashes in the meantime loses an offer it never
// acknowledged, as it does between sending one and its record's sync.
const createDelay = 5 * time.Millisecond

// maxAnswerNotes bounds the providers and profiles answersFast remembers.
const maxAnswerNotes = 1024

type answerKey struct {
	peer    peer.ID
	profile string
}

// answersFast reports whether p answered its last offer for profile within
// createDelay.
func (e *requesterHalf) answersFast(p peer.ID, profile string) bool {
	e.reqMu.Lock()
	defer e.reqMu.Unlock()
	return e.fast[answerKey{p, profile}]
}

// noteAnswer records whether p answered an offer for profile within
// createDelay.
func (e *requesterHalf) noteAnswer(p peer.ID, profile string, fast bool) {
	k := answerKey{p, profile}
	e.reqMu.Lock()
	defer e.reqMu.Unlock()
	if !fast {
		delete(e.fast, k)
		return
	}
	if len(e.fast) >= maxAnswerNotes {
		clear(e.fast)
	}
	e.fast[k] = true
}

// created is the write that creates a delegation, which its first attempt
// overlaps with sending the offer and reading the answer. It is made once,
// by whoever claims it first: Delegate, or the follower when it has
// something to write (the result with the record, in one write, when that
// comes first). A nil *created is a delegation already stored (one
// recovered at start).
type created struct {
	e *requesterHalf
	d store.Delegation
	// at is when Delegate began the delegation: the record's creation time
	// when the result is written with it.
	at time.Time

	mu    sync.Mutex
	taken bool

	written chan struct{} // closed once the write is done
	err     error         // its outcome, set before written is closed
	// abort ends the follower, set before the write begins: a delegation
	// never stored is not followed (its stream is reset at once, not
	// when the provider next writes to it).
	abort func(error)
}

func newCreated(e *requesterHalf, d store.Delegation, at time.Time) *created {
	return &created{e: e, d: d, at: at, written: make(chan struct{})}
}

// claim reports whether the caller is the one to make the write, which it
// must then report with done. Only the first call claims it.
func (c *created) claim() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken {
		return false
	}
	c.taken = true
	return true
}

// done reports the write's outcome.
func (c *created) done(err error) {
	c.err = err
	close(c.written)
	if err != nil && c.abort != nil {
		c.abort(err)
	}
}

// wait returns once the delegation is stored, or why it could not be,
// writing the record alone if no one has claimed the write yet.
func (c *created) wait() error {
	if c == nil {
		return nil
	}
	c.writeAlone()
	<-c.written
	return c.err
}

// writeAlone writes the record alone, unless someone has claimed the write
// already, and reports whether it did.
func (c *created) writeAlone() bool {
	if !c.claim() {
		return false
	}
	c.done(c.e.createRecord(c.d))
	return true
}

// createRecord writes a new delegation's record (or d with its outcome,
// and events, when the result came first).
func (e *requesterHalf) createRecord(d store.Delegation, events ...store.Event) error {
	if e.beforeCreate != nil {
		if err := e.beforeCreate(d); err != nil {
			return err
		}
	}
	return e.create(d, events...)
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
	o := &outgoing{cancel: cancel, offerHash: digestLater(protocol.OfferProofDigest(d.Offer), d.Offer)} // begun in the background once the offer is out (attempt)
	if cr != nil {
		cr.abort = cancel
	}
	e.reqMu.Lock()
	e.outgoing[d.ID] = o
	e.reqMu.Unlock()
	// Not ended (a new delegation, or one recovered open), and every
	// transition from here publishes its state: Wait need not read it.
	e.setLive(d.ID, true)
	forget := func() {
		e.setLive(d.ID, false)
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
		case outcomeRefused:
			// Over a stream limit while other streams to the provider
			// are open: the next attempt waits for one of them to close
			// (streamgate.go), until the deadline; not a failed attempt.
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
