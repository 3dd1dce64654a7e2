package delegation

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/gpu"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// HandleStream serves one inbound /kith/delegate/1.0.0 stream from remote
// (the libp2p-authenticated peer). The node calls it from its stream
// handler; it returns when the conversation on the stream is over and has
// closed the stream.
func (e *providerHalf) HandleStream(s Stream, remote peer.ID) {
	done := make(chan struct{})
	if err := e.goWithRun(func(ctx context.Context) {
		defer close(done)
		e.serve(ctx, s, remote)
	}); err != nil {
		_ = s.Reset()
		return
	}
	<-done
}

func (e *providerHalf) serve(ctx context.Context, s Stream, remote peer.ID) {
	// A peer opening streams far faster than its offer and query rates
	// allow is refused before the envelope costs any public-key work.
	if !e.streams.allow(remote, e.cfg.Now()) {
		e.log.Debug("inbound stream refused", "peer", remote, "rule", "stream_rate")
		e.m.rateLimited.WithLabelValues("stream").Inc()
		_ = s.Reset()
		return
	}
	c, first, raw, err := protocol.Accept(s, e.id, remote, e.st, e.cfg.Conn)
	if err != nil {
		e.log.Debug("inbound stream refused", "peer", remote, "err", err)
		e.m.inboundFails.WithLabelValues(inboundFailure(err)).Inc()
		_ = s.Reset()
		return
	}
	defer s.Close()
	// A stream whose delegation has ended may carry the requester's next
	// offer (protocol 1.4, StreamReuse): the handlers that end with a
	// result return it, and it is served as if it had opened the stream,
	// admitted as of its arrival.
	e.trace(Received, remote, first)
	issued := c.Header().IssuedAt
	for first != nil {
		var next protocol.Message
		var nextRaw []byte
		switch m := first.(type) {
		case *protocol.CapabilityQuery:
			e.answerQuery(c, remote, m)
		case *protocol.DelegationOffer:
			next, nextRaw = e.serveOffer(ctx, s, c, remote, m, raw, issued)
		case *protocol.DelegationContinue:
			e.serveContinue(ctx, c, remote, m, raw)
		case *protocol.DelegationStatus:
			next, nextRaw = e.serveReattach(ctx, c, remote, m)
		case *protocol.DelegationCancel:
			e.cancelTask(remote, m.ID, m.Reason)
		default:
			e.log.Debug("unexpected first message", "peer", remote, "type", first.Type())
		}
		first, raw, issued = next, nextRaw, e.cfg.Now()
	}
}

func (e *providerHalf) send(c *protocol.Conn, remote peer.ID, m protocol.Message) error {
	e.trace(Sent, remote, m)
	return c.Send(m)
}

// trustOf is the trust level this node gives p (untrusted if unknown).
func (e *core) trustOf(p peer.ID) protocol.TrustLevel {
	if rec, err := e.st.GetPeer(p); err == nil {
		return rec.Trust
	}
	return protocol.Untrusted
}

// assertion is this node's signed capability assertion for asker: the
// profiles asker may use, and the trust it is granted.
func (e *providerHalf) assertion(asker peer.ID, want []string) (protocol.CapabilityAssertion, error) {
	now := e.cfg.Now()
	trust := e.trustOf(asker)
	a := protocol.CapabilityAssertion{
		Provider:     e.id.PeerID(),
		Versions:     e.versions,
		GrantedTrust: trust,
		IssuedAt:     now,
		ExpiresAt:    now.Add(e.cfg.CapabilityTTL),

		MaxPayloadBytes: uint64(e.maxPayload),
	}
	e.provMu.Lock()
	for _, p := range e.profiles {
		if p.MinTrust <= trust && (len(want) == 0 || slices.Contains(want, p.Name)) {
			a.Profiles = append(a.Profiles, p.Profile)
		}
	}
	e.provMu.Unlock()
	slices.SortFunc(a.Profiles, func(x, y protocol.Profile) int {
		if x.Name < y.Name {
			return -1
		}
		if x.Name > y.Name {
			return 1
		}
		return 0
	})
	a.Capacity = e.Capacity()
	return a, nil
}

// Capacity is this node's remote pool load now: delegations from peers
// running, and slots free.
func (e *providerHalf) Capacity() protocol.Capacity {
	active := len(e.slots)
	return protocol.Capacity{Active: uint32(active), FreeSlots: uint32(cap(e.slots) - active)}
}

func (e *providerHalf) answerQuery(c *protocol.Conn, remote peer.ID, q *protocol.CapabilityQuery) {
	// A query from a peer below query_trust, or beyond its rate, gets no
	// answer: there is no reject message for queries, and silence tells a
	// prober nothing.
	if !e.queries.allow(remote, e.cfg.Now()) {
		e.log.Debug("capability query dropped", "peer", remote, "rule", "rate_limited")
		e.m.rateLimited.WithLabelValues("query").Inc()
		return
	}
	if trust := e.trustOf(remote); trust < e.cfg.QueryTrust {
		e.log.Debug("capability query dropped", "peer", remote, "rule", "query_trust", "trust", trust)
		return
	}
	a, err := e.assertion(remote, q.Profiles)
	if err != nil {
		return
	}
	signed, err := protocol.SignCapability(e.id, a)
	if err != nil {
		e.log.Error("sign capability", "err", err)
		return
	}
	_ = e.send(c, remote, &protocol.CapabilityResponse{Assertion: signed})
}

// admit runs the admission pipeline for an offer, in order. It returns the
// profile, or the typed reason the first failing rule gives.
func (e *providerHalf) admit(remote peer.ID, issuedAt time.Time, o *protocol.DelegationOffer) (*Profile, *RejectedError) {
	self := e.id.PeerID()
	if o.HopLimit == 0 {
		return nil, &RejectedError{protocol.ReasonLoopDetected, "hop limit reached"}
	}
	if slices.Contains(o.Chain, self) {
		return nil, &RejectedError{protocol.ReasonLoopDetected, "this node is already in the delegation chain"}
	}
	if !e.offers.allow(remote, e.cfg.Now()) {
		e.m.rateLimited.WithLabelValues("offer").Inc()
		return nil, &RejectedError{protocol.ReasonRateLimited, fmt.Sprintf("more than %g offers per second", e.cfg.OffersPerSecond)}
	}
	if e.cfg.Admit != nil {
		if r, detail := e.cfg.Admit(remote, o); r != protocol.ReasonUnspecified {
			return nil, &RejectedError{r, detail}
		}
	}
	p, ok := e.profile(o.Profile)
	if !ok {
		return nil, &RejectedError{protocol.ReasonNoMatchingProfile, fmt.Sprintf("no profile %q here", o.Profile)}
	}
	if n := protocol.PayloadSize(o.Task.Parts); n > e.maxPayload {
		return nil, &RejectedError{protocol.ReasonPayloadTooLarge, fmt.Sprintf("task of %d bytes, this node carries at most %d", n, e.maxPayload)}
	}
	if trust := e.trustOf(remote); trust < p.MinTrust {
		return nil, &RejectedError{protocol.ReasonNotAllowed,
			fmt.Sprintf("profile %q needs trust %s, this peer is %s", o.Profile, p.MinTrust, trust)}
	}
	if o.BudgetTokens == 0 || o.BudgetTokens < p.MinBudgetTokens {
		return nil, &RejectedError{protocol.ReasonBudgetTooLow,
			fmt.Sprintf("budget %d below profile minimum %d", o.BudgetTokens, max(p.MinBudgetTokens, 1))}
	}
	if p.MaxBudgetTokens > 0 && o.BudgetTokens > p.MaxBudgetTokens {
		return nil, &RejectedError{protocol.ReasonBudgetTooHigh,
			fmt.Sprintf("budget %d above profile maximum %d", o.BudgetTokens, p.MaxBudgetTokens)}
	}
	if o.Timeout > 0 && !issuedAt.Add(o.Timeout).After(e.cfg.Now()) {
		return nil, &RejectedError{protocol.ReasonExpired, "the requester's deadline passed before the offer arrived"}
	}
	return p, nil
}

func (e *providerHalf) reject(c *protocol.Conn, remote peer.ID, id protocol.DelegationID, r *RejectedError) {
	e.log.Info("offer rejected", "peer", remote, "delegation", id, "reason", r.Reason, "detail", r.Detail)
	e.m.offerRejects.WithLabelValues(r.Reason.String()).Inc()
	_ = e.send(c, remote, &protocol.DelegationReject{ID: id, Reason: r.Reason, Detail: r.Detail})
}

// lease grants the VRAM a profile declares, or says why not.
func (e *providerHalf) lease(p *Profile, id protocol.DelegationID, local bool) (*gpu.Lease, *RejectedError) {
	if p.VRAMMiB == 0 {
		return nil, nil
	}
	if e.cfg.Ledger == nil {
		return nil, &RejectedError{protocol.ReasonInsufficientVRAM, "this node has no GPU inventory"}
	}
	owner := "remote " + id.String()
	if local {
		owner = "local " + id.String()
	}
	l, err := e.cfg.Ledger.Grant(gpu.LeaseRequest{Owner: owner, VRAMMiB: p.VRAMMiB, Local: local})
	if err != nil {
		if local {
			return nil, &RejectedError{protocol.ReasonInsufficientVRAM, err.Error()}
		}
		// The ledger's words name this node's devices, free memory and,
		// when NVML fails, the driver's error: the log gets them, the
		// peer the profile's need.
		e.log.Info("VRAM lease refused", "delegation", id, "profile", p.Name, "err", err)
		return nil, &RejectedError{protocol.ReasonInsufficientVRAM,
			fmt.Sprintf("profile %q needs %d MiB of VRAM on one device, which this node cannot lease now", p.Name, p.VRAMMiB)}
	}
	return l, nil
}

// takeSlot takes a remote-pool slot for p, or says why not: the pool is
// full, p already holds its share of it, or p is untrusted and the slots
// untrusted peers may share are taken (the rest stay for the peers the user
// verified or trusted, however many identities a stranger makes).
func (e *providerHalf) takeSlot(p peer.ID, trust protocol.TrustLevel) *RejectedError {
	e.provMu.Lock()
	defer e.provMu.Unlock()
	if held := e.perPeer[p]; held >= e.cfg.MaxRemotePerPeer {
		e.m.poolRefusals.WithLabelValues("peer_share").Inc()
		return &RejectedError{protocol.ReasonBusy, fmt.Sprintf("this peer already holds %d of its %d remote slots", held, e.cfg.MaxRemotePerPeer)}
	}
	untrusted := trust < protocol.Verified
	if untrusted && e.untrusted >= e.cfg.MaxUntrustedRemote {
		e.m.poolRefusals.WithLabelValues("untrusted_share").Inc()
		return &RejectedError{protocol.ReasonBusy, fmt.Sprintf("the %d remote slots open to untrusted peers are in use", e.cfg.MaxUntrustedRemote)}
	}
	select {
	case e.slots <- struct{}{}:
	default:
		e.m.poolRefusals.WithLabelValues("pool_full").Inc()
		return &RejectedError{protocol.ReasonBusy, fmt.Sprintf("all %d remote slots in use", cap(e.slots))}
	}
	e.perPeer[p]++
	if untrusted {
		e.untrusted++
	}
	return nil
}

func (e *providerHalf) releaseSlot(p peer.ID, trust protocol.TrustLevel) {
	e.provMu.Lock()
	defer e.provMu.Unlock()
	<-e.slots
	if e.perPeer[p]--; e.perPeer[p] <= 0 {
		delete(e.perPeer, p)
	}
	if trust < protocol.Verified {
		e.untrusted--
	}
}

// timeoutFor clamps the offered timeout to the profile's and the node's.
func (e *providerHalf) timeoutFor(p *Profile, offered time.Duration) time.Duration {
	t := offered
	limit := p.Timeout
	if limit <= 0 {
		limit = e.cfg.DefaultTimeout
	}
	if t <= 0 || t > limit {
		t = limit
	}
	return min(t, e.cfg.MaxTimeout)
}

// serveOffer admits an offer and runs its task, following the stream until
// the delegation is over. It returns the requester's next offer when one
// came on the stream after this delegation's result (nil otherwise).
func (e *providerHalf) serveOffer(ctx context.Context, s Stream, c *protocol.Conn, remote peer.ID, o *protocol.DelegationOffer, raw []byte, issued time.Time) (protocol.Message, []byte) {
	// A repeated offer (the requester lost our accept) is a reattach.
	key, found := e.providerKey(remote, o.ID)
	if found {
		return e.serveReattach(ctx, c, remote, &protocol.DelegationStatus{ID: o.ID, Query: true})
	}
	p, rej := e.admit(remote, issued, o)
	if rej == nil {
		rej = e.checkContextOffer(o) // contexts: context.go
	}
	if rej != nil {
		e.reject(c, remote, o.ID, rej)
		return nil, nil
	}
	trust := e.trustOf(remote)
	if rej := e.takeSlot(remote, trust); rej != nil {
		e.reject(c, remote, o.ID, rej)
		return nil, nil
	}
	timeout := e.timeoutFor(p, o.Timeout)
	now := e.cfg.Now()
	t := &task{
		id: key, wire: o.ID, role: store.RoleProvider, requester: remote, trust: trust, offer: o,
		offerHash: digestOf(raw), profile: p, deadline: now.Add(timeout),
		remote: true, done: make(chan struct{}),
	}
	lease, rej := e.lease(p, o.ID, false)
	if rej != nil {
		e.releaseSlot(remote, trust)
		e.reject(c, remote, o.ID, rej)
		return nil, nil
	}
	t.lease = lease
	accept, running, err := t.openingEvents()
	if err != nil {
		e.releaseSlot(remote, trust)
		t.releaseLease()
		return nil, nil
	}
	// A large offer's file is written while the task runs, not in the write
	// that stores its record (store/stage.go); runTask drops it if that
	// write never comes.
	e.st.StageOffer(store.RoleProvider, key, raw)
	// Nothing is acknowledged yet: the task starts at once, and its record
	// is written (and the accept sent) when it ends or after openDelay,
	// whichever comes first (see openTask).
	t.open = openPending
	t.record = store.Delegation{
		ID: key, Role: store.RoleProvider, Peer: remote, Remote: true, Parent: o.ParentID,
		ContextID: o.ContextID, Profile: o.Profile, State: protocol.StateRunning,
		BudgetTokens: o.BudgetTokens, Offer: raw, Deadline: t.deadline,
	}
	t.openEvs = []store.Event{accept, running}
	// If it cannot be stored, the stream ends at once: the requester,
	// told nothing, offers again rather than wait for its deadline.
	t.abort = func() { _ = s.Reset() }
	t.attach(c)
	e.startTask(ctx, t)
	return e.readRequester(ctx, c, remote, t)
}

// openDelay is how long a remote task may run before its record is
// written and its accept sent. A task that ends sooner is stored once, its
// accept and result together, so that a short delegation costs the
// provider one durable write on its critical path, not two. The price: a
// task that was running, unacknowledged, when the node crashed is run again
// when the requester re-offers it, as any offer it never saw accepted.
const openDelay = 10 * time.Millisecond

// openTask writes a pending task's record, its opening events and extra in
// one write, then sends them. It reports whether the task is open (already,
// or now), and whether extra went out with the opening; when the write
// fails the task is cancelled.
func (e *providerHalf) openTask(t *task, extra ...store.Event) (open, stored bool) {
	t.logMu.Lock()
	defer t.logMu.Unlock()
	return e.openTaskLocked(t, extra...)
}

// openTaskLocked is openTask with t.logMu held.
func (e *providerHalf) openTaskLocked(t *task, extra ...store.Event) (open, stored bool) {
	switch t.open {
	case openDone:
		return true, false
	case openFailed, openMerged:
		return false, false
	}
	if t.openTimer != nil {
		t.openTimer.Stop()
	}
	evs := slices.Concat(t.openEvs, extra)
	if err := e.create(t.record, evs...); err != nil {
		t.open = openFailed
		e.log.Error("store offer", "delegation", t.id, "err", err)
		t.cancel(&stopCause{protocol.StateFailed, ReasonStore + ": " + err.Error()})
		t.abort()
		return false, false
	}
	t.open = openDone
	t.logged = append(t.logged, evs...)
	e.publishNew(t.role, t.id, 1, evs)
	out := make([][]byte, 0, len(evs))
	for _, ev := range evs {
		if ev.Type != EventAccepted && ev.Type != EventStatus {
			continue // this node's own notes (EventPaused)
		}
		e.traceEncoded(Sent, t.requester, ev.Data)
		out = append(out, ev.Data)
	}
	t.send(out...)
	return true, true
}

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

// readRequester reads what the requester sends on an attached stream
// (cancel, continuations) until the task is over and the requester has
// closed its side, which is how it acknowledges the result, or sent its
// next offer on the stream (1.4, StreamReuse), which it returns once the
// task is over: a requester sends one only after this delegation's result.
func (e *providerHalf) readRequester(ctx context.Context, c *protocol.Conn, remote peer.ID, t *task) (protocol.Message, []byte) {
	for {
		wait := time.Until(t.deadline) + c.IOTimeout()
		m, raw, err := c.RecvRaw(max(wait, c.IOTimeout()))
		if err != nil {
			return nil, nil
		}
		e.trace(Received, remote, m)
		switch m := m.(type) {
		case *protocol.DelegationOffer:
			if m.ID == t.wire {
				continue // this delegation's own offer again: it is here already
			}
			select {
			case <-t.done:
				return m, raw
			case <-ctx.Done():
				return nil, nil
			}
		case *protocol.DelegationCancel:
			if m.ID == t.wire {
				// This stream is the requester's: no need to look the task
				// up (it may not even be stored yet, see openDelay).
				t.cancel(&stopCause{protocol.StateCancelled, cmp.Or(m.Reason, "cancelled by requester")})
			}
		case *protocol.DelegationContinue:
			if m.ID != t.wire {
				e.reject(c, remote, m.ID, &RejectedError{protocol.ReasonUnknownDelegation, "this stream follows another delegation"})
				continue
			}
			if _, rej := e.continueTask(t, m, raw); rej != nil {
				e.reject(c, remote, m.ID, rej)
			}
		}
	}
}

// startTask runs t in the background: in the remote pool when it holds a
// slot, directly when it is local work.
func (e *providerHalf) startTask(ctx context.Context, t *task) {
	e.provMu.Lock()
	e.running[t.id] = t
	e.provMu.Unlock()
	taskCtx, cancel := context.WithCancelCause(withParent(ctx, t))
	t.cancel = cancel
	if t.answered == nil {
		t.answered = make(chan struct{}, 1)
	}
	if t.open == openPending {
		t.logMu.Lock()
		t.openTimer = time.AfterFunc(e.openDelay, func() { _, _ = e.openTask(t) })
		t.logMu.Unlock()
	}
	e.wg.Add(1)
	e.workers.run(ctx, &e.wg, func() {
		defer e.wg.Done()
		defer cancel(nil)
		e.runTask(taskCtx, t)
	})
}

// cancelTask stops a running task on its requester's word; id is the
// requester's name for it.
func (e *providerHalf) cancelTask(remote peer.ID, id protocol.DelegationID, reason string) {
	key, found := e.providerKey(remote, id)
	if !found {
		return
	}
	e.provMu.Lock()
	t := e.running[key]
	e.provMu.Unlock()
	if t == nil || t.requester != remote {
		return
	}
	if reason == "" {
		reason = "cancelled by requester"
	}
	t.cancel(&stopCause{protocol.StateCancelled, reason})
}

// flushInterval coalesces streamed output: one durable status per interval
// instead of one per token.
const flushInterval = 100 * time.Millisecond

// providerFlushBytes is the most output one status carries: as much as a
// message can. Output is streamed every flushInterval, so this bound only
// caps one status of a fast executor, and output that a task produces
// within one interval goes out once, in its result, rather than in
// statuses and then again in the result (a 1 MiB echo was sent, stored and
// hashed twice on each side; with 8 MiB here, so was most of a 16 MiB
// one). Pending output holds the executor's own strings (pendingOutput),
// so waiting for the interval costs no copy.
const providerFlushBytes = protocol.MaxPayload

func (e *providerHalf) runTask(ctx context.Context, t *task) {
	// The slot and the lease go back as soon as the executor returns: a
	// requester that offers its next task the moment this result reaches
	// it finds the slot free. A task that asks for input holds neither
	// while it waits, and takes them again for its next turn.
	held := !t.resumed
	release := func() {
		if !held {
			return
		}
		held = false
		if t.remote {
			e.releaseSlot(t.requester, t.trust)
		}
		t.releaseLease()
	}
	defer func() {
		e.provMu.Lock()
		delete(e.running, t.id)
		e.provMu.Unlock()
		release()
		if t.remote {
			e.st.DropStaged(t.role, t.id) // its offer's file, if never stored
		}
		close(t.done)
	}()
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, t.deadline, &stopCause{protocol.StateExpired, ReasonTimeout})
	defer cancelDeadline()
	started := e.cfg.Now()

	var pending pendingOutput
	lastFlush := time.Now()
	flush := func() {
		if pending.n == 0 {
			return
		}
		st := &protocol.DelegationStatus{ID: t.wire, State: protocol.StateRunning, Seq: t.nextSeq(),
			Partial: []protocol.Part{protocol.TextPart(pending.take())}, Turn: t.turnTag()}
		lastFlush = time.Now()
		_ = e.emitStatus(t, st)
	}
	emit := func(u executor.Update) {
		pending.add(u.Text)
		if time.Since(lastFlush) >= flushInterval || pending.n >= providerFlushBytes {
			flush()
		}
	}
	var res executor.Result
	var err error
	if t.resumed {
		if err = e.awaitAnswer(ctx, t); err == nil {
			err = e.reacquire(ctx, t)
			held = err == nil
		}
	}
	for err == nil {
		stopWatch := e.watchLease(t)
		in := t.input()
		e.contextInput(t, &in) // contexts: the history (context.go)
		res, err = t.profile.Executor.Execute(ctx, in, emit)
		stopWatch()
		release()
		if err != nil || res.Input == nil {
			break
		}
		// A question: the turn ends, the task waits for the answer
		// holding nothing, then runs its next turn.
		if err = e.pause(ctx, t, res, &pending); err != nil {
			break
		}
		if err = e.reacquire(ctx, t); err != nil {
			break
		}
		held = true
		res = executor.Result{}
	}
	if t.idle() && e.stopping() {
		// Shut down while waiting for an answer: nothing runs, so nothing
		// is lost. The task stays input_required in the store and the next
		// run waits on (recoverProvider).
		return
	}
	res.Usage = t.totalUsage(res.Usage)
	// Output still pending goes out with the result, in the same durable
	// write: a fast task costs one write after its accept, not two. Its
	// status is numbered now, before any other, and built below unless
	// the result carries the same output anyway.
	var tail []store.Event
	var pendingSeq uint64
	if pending.n > 0 {
		pendingSeq = t.nextSeq()
	}

	state, reason, detail := protocol.StateCompleted, "", ""
	if errors.Is(err, executor.ErrBudgetExceeded) {
		// The backend overran the budget and said so: report the usage
		// honestly (the requester records the violation), keep the output.
		err, reason = nil, "backend reported usage above the budget"
	}
	if err != nil {
		state = protocol.StateFailed
		var sc *stopCause
		switch {
		case errors.As(context.Cause(ctx), &sc), errors.As(err, &sc):
			state, reason = sc.state, sc.reason
		case e.stopping():
			reason = ReasonProviderShutdown
		default:
			// An executor's error names local commands, paths and URLs:
			// the peer gets the rule, this node's log and store the detail.
			reason = ReasonExecutor + ": " + peerMessage(err)
			detail = ReasonExecutor + ": " + err.Error()
			e.log.Warn("executor failed", "delegation", t.id, "profile", t.profile.Name, "err", err)
		}
	}
	usage := protocol.Usage{Prompt: res.Usage.Prompt, Completion: res.Usage.Completion, Total: res.Usage.Total}
	out := []protocol.Part{}
	if res.Text != "" {
		out = append(out, protocol.TextPart(res.Text))
	}
	if n, limit := protocol.PayloadSize(out), e.outputCap(t.offer.BudgetTokens); n > limit {
		state, reason, out = protocol.StateFailed, fmt.Sprintf("%s: output of %d bytes, at most %d for this budget", ReasonPayloadTooLarge, n, limit), []protocol.Part{}
	}
	if !t.remote && detail != "" {
		reason, detail = detail, "" // local work: this node is the requester
	}
	if res.StoppedAtBudget && reason == "" {
		reason = "stopped at token budget"
	}
	if state == protocol.StatePreempted {
		// The requester hears of the preemption as a status first, so that
		// it can re-offer the task at once (DESIGN.md).
		st := &protocol.DelegationStatus{ID: t.wire, State: protocol.StatePreempted, Seq: t.nextSeq(), Reason: reason, Turn: t.turnTag()}
		if b, err := protocol.EncodeMessage(st); err == nil {
			tail = append(tail, store.Event{Type: EventStatus, State: protocol.StatePreempted, Data: b})
		}
	}
	e.keepTurn(t, state, out) // contexts: before the result is stored and sent (context.go)
	f := finishing{role: t.role, id: t.id, wire: t.wire, requester: t.requester, offerHash: t.offerHash}
	t.logMu.Lock()
	switch t.open {
	case openFailed:
		t.logMu.Unlock()
		return // nothing stored, nothing sent: the requester offers again
	case openPending:
		// Done before its record was written: store it once, with the
		// result. The result holds the whole output, so output not yet
		// streamed is not sent twice.
		t.open = openMerged
		if t.openTimer != nil {
			t.openTimer.Stop()
		}
		rec := t.record
		f.create, f.abort = &rec, t.abort
		f.logged = t.openEvs
		if state == protocol.StateCompleted && len(out) > 0 {
			pending = pendingOutput{}
		}
	default:
		f.logged = t.logged
	}
	t.logMu.Unlock()
	if pending.n > 0 {
		st := &protocol.DelegationStatus{ID: t.wire, State: protocol.StateRunning, Seq: pendingSeq,
			Partial: []protocol.Part{protocol.TextPart(pending.take())}, Turn: t.turnTag()}
		if b, err := protocol.EncodeMessage(st); err == nil {
			tail = append([]store.Event{{Type: EventStatus, State: protocol.StateRunning, Data: b}}, tail...)
		}
	}
	e.finish(f, state, outcomeReason{reason, detail}, out, usage, e.cfg.Now().Sub(started), tail, t.send)
}

// pendingOutput is output the executor emitted that has not gone out yet.
// Updates of pendingPartMin bytes or more are kept as the executor's own
// strings, smaller ones joined as they come, so that output is copied
// once, when it goes out, and not at all when the result carries it
// instead (a fast task).
type pendingOutput struct {
	parts []string
	small []byte // small updates since the last part
	n     int    // bytes pending
}

const pendingPartMin = 512

func (p *pendingOutput) add(s string) {
	p.n += len(s)
	if len(s) < pendingPartMin {
		p.small = append(p.small, s...)
		return
	}
	if len(p.small) > 0 {
		p.parts = append(p.parts, string(p.small))
		p.small = p.small[:0]
	}
	p.parts = append(p.parts, s)
}

// take returns the pending output and empties p.
func (p *pendingOutput) take() string {
	if len(p.small) > 0 {
		p.parts = append(p.parts, string(p.small))
		p.small = p.small[:0]
	}
	s := strings.Join(p.parts, "")
	clear(p.parts)
	p.parts, p.n = p.parts[:0], 0
	return s
}

// finishing names the delegation finish ends. id is where the store keeps
// it, wire what the requester calls it (the same but for a foreign ID, see
// providerKey); logged is what its log holds so far. create, when set, is
// the record of a task not yet stored, whose events are logged: finish
// writes it with them and the result, in one write, and sends them first.
type finishing struct {
	role      store.Role
	id, wire  protocol.DelegationID
	requester peer.ID
	offerHash *digest
	logged    []store.Event
	create    *store.Delegation
	abort     func() // ends the requester's stream when create cannot be stored
}

// emitStatus persists a status (streamed output) and then sends it; the
// first one of a pending task goes out with its opening, in one write.
func (e *providerHalf) emitStatus(t *task, st *protocol.DelegationStatus) error {
	raw, err := protocol.EncodeMessage(st)
	if err != nil {
		return err
	}
	ev := store.Event{Type: EventStatus, State: st.State, Data: raw}
	switch open, stored := e.openTask(t, ev); {
	case stored:
		return nil
	case !open:
		return ErrNotRunning // the opening failed: the task is being cancelled
	}
	t.logMu.Lock()
	defer t.logMu.Unlock()
	if err := e.appendEvent(t.role, t.id, ev); err != nil {
		return err
	}
	t.logged = append(t.logged, ev)
	if t.remote {
		e.trace(Sent, t.requester, st)
	}
	t.send(raw)
	return nil
}

// peerMessage is what a requester may hear of an executor's failure: what
// a handler chose to tell (executor.Tell), the typed reason a child
// delegation was rejected with, or nothing more than that it failed.
func peerMessage(err error) string {
	if m := executor.PeerMessage(err); m != "" {
		return m
	}
	var rej *RejectedError
	if errors.As(err, &rej) {
		return "a child delegation was rejected: " + rej.Reason.String()
	}
	return "the profile's executor failed (details are in the provider's log)"
}

// outcomeReason is why a delegation ended: wire is what the requester is
// told, local (when set) what this node's store records instead.
type outcomeReason struct{ wire, local string }

// finish signs and stores the result, with tail (statuses not yet stored
// or sent) in the same write, then sends tail and the result through
// deliver. The first terminal state wins: if the delegation already ended,
// nothing is sent from here.
func (e *providerHalf) finish(f finishing, state protocol.State, why outcomeReason, out []protocol.Part, usage protocol.Usage,
	took time.Duration, tail []store.Event, deliver func(...[]byte)) {
	role, id, requester := f.role, f.id, f.requester
	reason := why.wire
	events := slices.Concat(f.logged, tail)
	now := e.cfg.Now()
	proof, err := protocol.SignResultProof(e.id, protocol.ResultProof{
		DelegationID: f.wire, Requester: requester, Provider: e.id.PeerID(),
		OfferSHA256: f.offerHash.get(), TranscriptSHA256: transcriptHash(events),
		Usage: usage, CompletedAt: now, State: state, Turns: proofTurns(events),
		OutputSHA256: protocol.OutputDigest(out),
	})
	if err != nil {
		e.log.Error("sign result proof", "delegation", id, "err", err)
		return
	}
	res := &protocol.DelegationResult{ID: f.wire, State: state, Output: out, Usage: usage, Duration: took, Proof: proof, Reason: reason}
	if e.mutateResult != nil {
		e.mutateResult(res)
	}
	raw, err := protocol.EncodeMessage(res)
	if err != nil {
		e.log.Error("encode result", "delegation", id, "err", err)
		return
	}
	resultEv := store.Event{Type: EventResult, State: state}
	if f.create != nil {
		d := *f.create
		d.State, d.Result, d.Reason, d.Usage = state, raw, cmp.Or(why.local, reason), store.Usage(usage)
		if err := e.create(d, append(events, resultEv)...); err != nil {
			e.log.Error("store result", "delegation", id, "err", err)
			f.abort()
			return
		}
		e.publishNew(role, id, 1, append(events, resultEv))
		tail = events // the accept goes out first
	} else {
		e.st.StageResult(role, id, raw) // its file is written outside the commit queue (store/stage.go)
		_, err = e.transitionAfter(role, id, tail, state, resultEv, func(d *store.Delegation) {
			d.Result = raw
			d.Reason = cmp.Or(why.local, reason)
			d.Usage = store.Usage(usage)
		})
		if err != nil {
			e.st.DropStaged(role, id)
			if !errors.Is(err, store.ErrTerminal) {
				e.log.Error("store result", "delegation", id, "err", err)
			}
			return
		}
	}
	// What the requester has not yet been sent goes out with the result,
	// in one Write.
	msgs := make([][]byte, 0, len(tail)+1)
	for _, ev := range tail {
		if role == store.RoleProvider {
			e.traceEncoded(Sent, requester, ev.Data)
		}
		msgs = append(msgs, ev.Data)
	}
	if role == store.RoleProvider {
		e.trace(Sent, requester, res)
	}
	deliver(append(msgs, raw)...)
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

// recoverProvider fails what a previous run left running: the executors
// died with the process. The signed failure waits in the store for the
// requester to reattach and collect.
func (e *providerHalf) recoverProvider(open []store.Delegation) error {
	for _, d := range open {
		if d.State == protocol.StateInputRequired {
			// Nothing ran while it waited: it waits on.
			err := e.resumeWaiting(d)
			if err == nil {
				continue
			}
			e.log.Warn("cannot resume a delegation waiting for input", "delegation", d.ID, "err", err)
		}
		hash := &digest{}
		wire := d.ID
		if len(d.Offer) > 0 {
			hash = digestOf(d.Offer)
			if m, err := protocol.DecodeMessage(d.Offer); err == nil {
				if o, ok := m.(*protocol.DelegationOffer); ok {
					wire = o.ID
				}
			}
		}
		logged, err := e.st.Events(store.RoleProvider, d.ID, 0)
		if err != nil {
			e.log.Error("read events", "delegation", d.ID, "err", err)
			continue
		}
		e.log.Info("failing delegation interrupted by restart", "delegation", d.ID, "peer", d.Peer)
		f := finishing{role: store.RoleProvider, id: d.ID, wire: wire, requester: d.Peer, offerHash: hash, logged: logged}
		e.finish(f, protocol.StateFailed, outcomeReason{wire: ReasonProviderRestarted}, nil, protocol.Usage{}, 0, nil, func(...[]byte) {})
	}
	return nil
}

var liveStates = []protocol.State{protocol.StateOffered, protocol.StateAccepted, protocol.StateRunning, protocol.StateInputRequired}

func ptr[T any](v T) *T { return &v }
