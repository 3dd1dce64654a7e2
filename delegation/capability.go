package delegation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/internal/promread"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Where a cached capability assertion came from.
const (
	capFromQuery  = "query"  // a capability_response to our query: per-asker
	capFromGossip = "gossip" // a gossiped advert: what anyone may use, with load
)

// knownCaps is what this node knows of one peer's capabilities: the last
// answer to a query (profiles it may use, trust granted to it) and the
// freshest advert (load).
type knownCaps struct {
	query  *protocol.CapabilityAssertion
	advert *protocol.CapabilityAssertion
}

// halfLife reports whether a is still within the first half of its
// lifetime at now: load figures age fast, so older ones are asked again.
func halfLife(a *protocol.CapabilityAssertion, now time.Time) bool {
	return a != nil && now.Before(a.IssuedAt.Add(a.ExpiresAt.Sub(a.IssuedAt)/2))
}

func live(a *protocol.CapabilityAssertion, now time.Time) bool {
	return a != nil && now.Before(a.ExpiresAt)
}

// capabilities returns p's verified capability assertion, asking p when
// no answer to a query is cached or the cached one is stale (past half its
// life).
//
// Callers that need p's capabilities at the same time share one query
// (a plan's burst of offers to one provider would otherwise open as many
// query streams at once, against its limit on a peer's streams); one whose
// own context ended asks again. When the query fails, an answer still
// live serves.
func (e *requesterHalf) capabilities(ctx context.Context, p peer.ID) (*protocol.CapabilityAssertion, error) {
	for {
		e.reqMu.Lock()
		k := e.caps[p]
		if halfLife(k.query, e.cfg.Now()) {
			e.reqMu.Unlock()
			return k.query, nil
		}
		q := e.capQueries[p]
		lead := q == nil
		if lead {
			q = &capQuery{done: make(chan struct{})}
			e.capQueries[p] = q
		}
		e.reqMu.Unlock()
		if lead {
			fresh, err := e.QueryCapabilities(ctx, p)
			if err == nil {
				q.a = &fresh
			}
			q.err = err
			e.reqMu.Lock()
			delete(e.capQueries, p)
			e.reqMu.Unlock()
			close(q.done)
		} else {
			select {
			case <-q.done:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
			if q.err != nil && ctx.Err() == nil && (errors.Is(q.err, context.Canceled) || errors.Is(q.err, context.DeadlineExceeded)) {
				continue // the leader's caller gave up, not p
			}
		}
		if q.err == nil {
			return q.a, nil
		}
		if live(k.query, e.cfg.Now()) {
			return k.query, nil
		}
		return nil, q.err
	}
}

// capQuery is a capability query in flight, shared by the callers that
// wait for it.
type capQuery struct {
	done chan struct{} // closed once a and err are set
	a    *protocol.CapabilityAssertion
	err  error
}

// QueryCapabilities asks p for its signed capability assertion, verifies
// it (signature over the exact bytes, provider is p, not expired, a common
// protocol version) and caches it, in memory and in the store, until it
// expires. A rejected assertion is counted (CapabilityRejections).
func (e *requesterHalf) QueryCapabilities(ctx context.Context, p peer.ID) (protocol.CapabilityAssertion, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Conn.IOTimeout+2*time.Second)
	defer cancel()
	s, err := e.cfg.Dialer.OpenStream(ctx, p)
	if err != nil {
		return protocol.CapabilityAssertion{}, err
	}
	defer s.Close()
	q := &protocol.CapabilityQuery{Versions: protocol.Supported}
	c, err := protocol.Dial(s, e.id, p, q, e.cfg.Conn)
	if err != nil {
		_ = s.Reset()
		return protocol.CapabilityAssertion{}, err
	}
	e.trace(Sent, p, q)
	m, err := c.Recv(c.IOTimeout())
	if err != nil {
		return protocol.CapabilityAssertion{}, err
	}
	e.trace(Received, p, m)
	resp, ok := m.(*protocol.CapabilityResponse)
	if !ok {
		return protocol.CapabilityAssertion{}, fmt.Errorf("delegation: %s answered a capability query with %s", p, m.Type())
	}
	a, err := e.learn(p, resp.Assertion, capFromQuery)
	if err != nil {
		return protocol.CapabilityAssertion{}, err
	}
	return *a, nil
}

// LearnAdvert takes a gossiped capability advert published by from: it is
// verified (a forged, expired or mismatched-peer advert is refused and
// counted), and kept when it is fresher than the one known. Requesters use
// adverts' load to choose among providers.
func (e *requesterHalf) LearnAdvert(from peer.ID, signed crypto.Assertion) error {
	_, err := e.learn(from, signed, capFromGossip)
	return err
}

// learn verifies signed as p's capability assertion, keeps it if fresher
// than what is known from the same source, and persists it.
func (e *requesterHalf) learn(p peer.ID, signed crypto.Assertion, source string) (*protocol.CapabilityAssertion, error) {
	now := e.cfg.Now()
	a, err := protocol.VerifyCapability(p, signed, now)
	if err == nil {
		_, err = protocol.Negotiate(protocol.Supported, a.Versions)
	}
	if err != nil {
		e.countRejection(err)
		e.log.Debug("capability assertion rejected", "peer", p, "source", source, "err", err)
		return nil, err
	}
	e.reqMu.Lock()
	k := e.caps[p]
	slot := &k.query
	if source == capFromGossip {
		slot = &k.advert
	}
	newer := *slot == nil || !a.IssuedAt.Before((*slot).IssuedAt)
	if newer {
		*slot = &a
		e.caps[p] = k
	}
	e.reqMu.Unlock()
	if newer {
		if err := e.st.PutCapability(store.Capability{
			Peer: p, Signed: signed, Source: source, ReceivedAt: now, ExpiresAt: a.ExpiresAt,
		}); err != nil {
			e.log.Warn("store capability", "peer", p, "err", err)
		}
	}
	return &a, nil
}

// Capability rejection reasons, the keys of CapabilityRejections.
const (
	RejectForged         = "forged"
	RejectExpired        = "expired"
	RejectMismatchedPeer = "mismatched_peer"
	RejectNoVersion      = "no_common_version"
	RejectMalformed      = "malformed"
)

func (e *requesterHalf) countRejection(err error) {
	reason := RejectMalformed
	switch {
	case errors.Is(err, crypto.ErrBadSignature):
		reason = RejectForged
	case errors.Is(err, protocol.ErrExpired):
		reason = RejectExpired
	case errors.Is(err, protocol.ErrPeerMismatch):
		reason = RejectMismatchedPeer
	case errors.Is(err, protocol.ErrVersionUnsupported):
		reason = RejectNoVersion
	}
	e.m.capRejects.WithLabelValues(reason).Inc()
}

// CapabilityRejections counts the capability assertions (query answers and
// adverts) this node refused, by reason.
func (e *requesterHalf) CapabilityRejections() map[string]uint64 {
	return promread.Counters(e.m.capRejects, "reason")
}

// KnownCapabilities returns the freshest verified, unexpired assertion
// known for every peer (a query answer or an advert, whichever was issued
// later), with where it came from.
func (e *requesterHalf) KnownCapabilities() map[peer.ID]KnownCapability {
	now := e.cfg.Now()
	e.reqMu.Lock()
	defer e.reqMu.Unlock()
	out := make(map[peer.ID]KnownCapability, len(e.caps))
	for p, k := range e.caps {
		if a, src := k.freshest(now); a != nil {
			out[p] = KnownCapability{Assertion: *a, Source: src}
		}
	}
	return out
}

// KnownCapability is a verified capability assertion and its source
// ("query" or "gossip").
type KnownCapability struct {
	Assertion protocol.CapabilityAssertion
	Source    string
}

func (k knownCaps) freshest(now time.Time) (*protocol.CapabilityAssertion, string) {
	q, g := k.query, k.advert
	if !live(q, now) {
		q = nil
	}
	if !live(g, now) {
		g = nil
	}
	switch {
	case q == nil && g == nil:
		return nil, ""
	case g == nil || (q != nil && !q.IssuedAt.Before(g.IssuedAt)):
		return q, capFromQuery
	default:
		return g, capFromGossip
	}
}

// loadCapabilities reads the capability cache back from the store,
// verifying every entry again.
func (e *requesterHalf) loadCapabilities() {
	cs, err := e.st.ListCapabilities()
	if err != nil {
		e.log.Warn("read capability cache", "err", err)
		return
	}
	for _, c := range cs {
		a, err := protocol.VerifyCapability(c.Peer, c.Signed, e.cfg.Now())
		if err != nil {
			continue
		}
		e.reqMu.Lock()
		k := e.caps[c.Peer]
		if c.Source == capFromGossip {
			k.advert = &a
		} else {
			k.query = &a
		}
		e.caps[c.Peer] = k
		e.reqMu.Unlock()
	}
}

// candidate is one possible provider and what ranks it.
type candidate struct {
	id      peer.ID
	a       *protocol.CapabilityAssertion
	trust   protocol.TrustLevel
	latency time.Duration // 0: unknown
}

// better ranks candidates: the trust this node gives the provider, then
// free slots (the freshest figure known), then round-trip time.
func better(x, y candidate) int {
	if c := cmp.Compare(y.trust, x.trust); c != 0 {
		return c
	}
	if c := cmp.Compare(y.a.Capacity.FreeSlots, x.a.Capacity.FreeSlots); c != 0 {
		return c
	}
	lx, ly := x.latency, y.latency
	if lx == 0 {
		lx = time.Hour
	}
	if ly == 0 {
		ly = time.Hour
	}
	return cmp.Compare(lx, ly)
}

func offers(a *protocol.CapabilityAssertion, profile string) bool {
	return slices.ContainsFunc(a.Profiles, func(p protocol.Profile) bool { return p.Name == profile })
}

// choose picks the best provider of profile among the finder's
// candidates. What is known (fresh query answers and gossiped adverts)
// ranks them without a round trip; peers of which nothing fresh is known
// are asked. The winner is then asked directly (unless a fresh answer is
// cached), because only a query answer says what this node may use.
//
// prefer, when set, is the provider that holds the state of the task's
// context (context.go): it is asked afresh, since a cached answer may
// predate the slots it now has in use, and wins if it still offers the
// profile to this node with a free slot and room for size bytes; if not,
// it is left out of the ranking (a cached answer would bring it back).
func (e *requesterHalf) choose(ctx context.Context, profile string, size int, prefer peer.ID) (peer.ID, *protocol.CapabilityAssertion, error) {
	if prefer != "" && prefer != e.id.PeerID() {
		a, err := e.QueryCapabilities(ctx, prefer)
		if err == nil && offers(&a, profile) && a.Capacity.FreeSlots > 0 && a.PayloadLimit() >= size {
			return prefer, &a, nil
		}
		e.log.Debug("context affinity: provider unavailable, choosing another", "peer", prefer, "profile", profile, "err", err)
	}
	if e.cfg.Finder == nil {
		return "", nil, fmt.Errorf("%w: %q (no local profile, no peer named, no discovery)", ErrNoProvider, profile)
	}
	now := e.cfg.Now()
	var ranked []candidate
	for _, p := range e.cfg.Finder.Candidates(ctx, profile) {
		if p == e.id.PeerID() || p == prefer {
			continue // prefer: just asked, and unfit
		}
		e.reqMu.Lock()
		k := e.caps[p]
		e.reqMu.Unlock()
		a, _ := k.freshest(now)
		if !halfLife(k.query, now) && (a == nil || !offers(a, profile)) {
			// Nothing fresh says p offers it to us: ask.
			q, err := e.capabilities(ctx, p)
			if err != nil {
				e.log.Debug("capability query failed", "peer", p, "err", err)
				continue
			}
			a = q
		}
		if a == nil || !offers(a, profile) || a.Capacity.FreeSlots == 0 || a.PayloadLimit() < size {
			continue
		}
		c := candidate{id: p, a: a, trust: e.trustOf(p)}
		if e.cfg.Latency != nil {
			c.latency = e.cfg.Latency(p)
		}
		ranked = append(ranked, c)
	}
	slices.SortStableFunc(ranked, better)
	for _, c := range ranked {
		a, err := e.capabilities(ctx, c.id)
		if err != nil {
			e.log.Debug("capability query failed", "peer", c.id, "err", err)
			continue
		}
		if offers(a, profile) && a.Capacity.FreeSlots > 0 && a.PayloadLimit() >= size {
			return c.id, a, nil
		}
	}
	return "", nil, fmt.Errorf("%w: %q", ErrNoProvider, profile)
}

// Advert is this node's capability advert for gossip: the profiles any
// peer may use (those with min_trust untrusted), its current load, signed.
func (e *providerHalf) Advert() (crypto.Assertion, protocol.CapabilityAssertion, error) {
	a, err := e.assertion("", nil)
	if err != nil {
		return crypto.Assertion{}, a, err
	}
	signed, err := protocol.SignCapability(e.id, a)
	return signed, a, err
}

// speaks reports whether p's capability assertion (the one it answered a
// query with, else its advertisement) lists v.
func (e *requesterHalf) speaks(p peer.ID, v protocol.Version) bool {
	e.reqMu.Lock()
	k := e.caps[p]
	e.reqMu.Unlock()
	a := k.query
	if a == nil {
		a = k.advert
	}
	return a != nil && protocol.Speaks(a.Versions, v)
}
