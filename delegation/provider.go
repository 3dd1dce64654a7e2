package delegation

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

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
		offerHash: digestLater(e.proofDigest(o), raw), profile: p, deadline: now.Add(timeout),
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
	// Its hash starts after the file's write: the write waits on the disk,
	// and a write that had to wait for a core behind the hash started up
	// to a millisecond late per MiB (store/stage.go).
	t.offerHash.begin()
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
			var offer *protocol.DelegationOffer
			if m, err := protocol.DecodeMessage(d.Offer); err == nil {
				if o, ok := m.(*protocol.DelegationOffer); ok {
					wire, offer = o.ID, o
				}
			}
			hash = digestOf(e.proofDigest(offer), d.Offer)
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
