package delegation

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
)

// capabilities returns p's verified capability assertion, asking p when
// none is cached or the cached one is stale (expired, or past half its
// life: load figures age fast).
func (e *Engine) capabilities(ctx context.Context, p peer.ID) (*protocol.CapabilityAssertion, error) {
	now := e.cfg.Now()
	e.mu.Lock()
	a, ok := e.caps[p]
	e.mu.Unlock()
	if ok && now.Before(a.IssuedAt.Add(a.ExpiresAt.Sub(a.IssuedAt)/2)) {
		return &a, nil
	}
	fresh, err := e.QueryCapabilities(ctx, p)
	if err != nil {
		return nil, err
	}
	return &fresh, nil
}

// QueryCapabilities asks p for its signed capability assertion, verifies
// it (signature over the exact bytes, provider is p, not expired, a common
// protocol version) and caches it.
func (e *Engine) QueryCapabilities(ctx context.Context, p peer.ID) (protocol.CapabilityAssertion, error) {
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
	a, err := protocol.VerifyCapability(p, resp.Assertion, e.cfg.Now())
	if err != nil {
		return protocol.CapabilityAssertion{}, err
	}
	if _, err := protocol.Negotiate(protocol.Supported, a.Versions); err != nil {
		return protocol.CapabilityAssertion{}, err
	}
	e.mu.Lock()
	e.caps[p] = a
	e.mu.Unlock()
	return a, nil
}

// choose picks the best provider of profile among the finder's candidates:
// one that offers it, with the most free slots.
func (e *Engine) choose(ctx context.Context, profile string) (peer.ID, *protocol.CapabilityAssertion, error) {
	if e.cfg.Finder == nil {
		return "", nil, fmt.Errorf("%w: %q (no local profile, no peer named, no discovery)", ErrNoProvider, profile)
	}
	var best peer.ID
	var bestA *protocol.CapabilityAssertion
	for _, p := range e.cfg.Finder.Candidates(ctx, profile) {
		if p == e.id.PeerID() {
			continue
		}
		a, err := e.capabilities(ctx, p)
		if err != nil {
			e.log.Debug("capability query failed", "peer", p, "err", err)
			continue
		}
		offers := false
		for _, pr := range a.Profiles {
			offers = offers || pr.Name == profile
		}
		if !offers || a.Capacity.FreeSlots == 0 {
			continue
		}
		if bestA == nil || a.Capacity.FreeSlots > bestA.Capacity.FreeSlots ||
			(a.Capacity.FreeSlots == bestA.Capacity.FreeSlots && a.GrantedTrust > bestA.GrantedTrust) {
			best, bestA = p, a
		}
	}
	if bestA == nil {
		return "", nil, fmt.Errorf("%w: %q", ErrNoProvider, profile)
	}
	return best, bestA, nil
}
