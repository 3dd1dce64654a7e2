package plan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// ErrNoProvider: no provider is left that may run a step (none offers its
// profile, none meets its trust constraint, or all have failed it).
var ErrNoProvider = errors.New("plan: no provider left for the step")

// ErrUnknownProfile: neither this node nor any known peer offers a profile
// the plan names.
var ErrUnknownProfile = errors.New("plan: unknown profile")

// target is where one attempt of a step goes.
type target struct {
	peer      peer.ID // this node's own ID for local work
	local     bool
	maxBudget uint64 // the provider's maximum for the profile; 0: none said
}

// offerOf returns what a provider says of profile in assertion a.
func offerOf(a protocol.CapabilityAssertion, profile string) (protocol.Profile, bool) {
	for _, p := range a.Profiles {
		if p.Name == profile {
			return p, true
		}
	}
	return protocol.Profile{}, false
}

func (c *Coordinator) trustOf(p peer.ID) protocol.TrustLevel {
	if p == c.self {
		return protocol.Trusted
	}
	rec, err := c.st.GetPeer(p)
	if err != nil {
		return protocol.Untrusted
	}
	return rec.Trust
}

func (c *Coordinator) localProfile(name string) (protocol.Profile, bool) {
	for _, p := range c.eng.Profiles() {
		if p.Name == name {
			return p, true
		}
	}
	return protocol.Profile{}, false
}

// known returns the verified assertions this node holds; with ask, it
// also asks the finder's candidates for profile that it knows nothing of
// offering it yet (discovery may cost a DHT lookup, so only when what is
// known does not do).
func (c *Coordinator) known(ctx context.Context, profile string, ask bool) map[peer.ID]protocol.CapabilityAssertion {
	out := map[peer.ID]protocol.CapabilityAssertion{}
	for p, k := range c.eng.KnownCapabilities() {
		out[p] = k.Assertion
	}
	if !ask || c.cfg.Finder == nil {
		return out
	}
	for _, p := range c.cfg.Finder.Candidates(ctx, profile) {
		if p == c.self {
			continue
		}
		if a, ok := out[p]; ok {
			if _, offers := offerOf(a, profile); offers {
				continue
			}
		}
		a, err := c.eng.QueryCapabilities(ctx, p)
		if err != nil {
			c.log.Debug("capability query failed", "peer", p, "err", err)
			continue
		}
		out[p] = a
	}
	return out
}

// choose picks where the next attempt of step goes: the pinned peer; else
// this node when it offers the profile and has not failed the step; else
// the best known provider (the trust this node gives it, then free slots,
// then peer ID, so that the choice is the same every time) that meets
// the trust constraint and is not excluded.
func (c *Coordinator) choose(ctx context.Context, st *Step, exclude map[peer.ID]bool) (target, error) {
	if st.Peer != "" {
		p, _ := peer.Decode(st.Peer) // Validate checked it
		if p == c.self {
			lp, ok := c.localProfile(st.Profile)
			if !ok {
				return target{}, fmt.Errorf("%w: this node does not offer %q", ErrNoProvider, st.Profile)
			}
			return target{peer: c.self, local: true, maxBudget: lp.MaxBudgetTokens}, nil
		}
		t := target{peer: p}
		if a, ok := c.eng.KnownCapabilities()[p]; ok {
			if pr, ok := offerOf(a.Assertion, st.Profile); ok {
				t.maxBudget = pr.MaxBudgetTokens
			}
		}
		return t, nil
	}
	minTrust := protocol.Untrusted
	if st.MinTrust != "" {
		minTrust, _ = protocol.ParseTrustLevel(st.MinTrust)
	}
	if lp, ok := c.localProfile(st.Profile); ok && !exclude[c.self] {
		return target{peer: c.self, local: true, maxBudget: lp.MaxBudgetTokens}, nil
	}
	type cand struct {
		id    peer.ID
		trust protocol.TrustLevel
		free  uint32
		max   uint64
	}
	var cands []cand
	for _, ask := range []bool{false, true} {
		for p, a := range c.known(ctx, st.Profile, ask) {
			if p == c.self || exclude[p] {
				continue
			}
			pr, ok := offerOf(a, st.Profile)
			if !ok || a.Capacity.FreeSlots == 0 {
				continue
			}
			tr := c.trustOf(p)
			if tr < minTrust {
				continue
			}
			cands = append(cands, cand{p, tr, a.Capacity.FreeSlots, pr.MaxBudgetTokens})
		}
		if len(cands) > 0 {
			break
		}
	}
	if len(cands) == 0 {
		why := "no provider offers it"
		if len(exclude) > 0 || minTrust > protocol.Untrusted {
			why = fmt.Sprintf("none that meets min_trust %s and has not failed it (%d excluded)", minTrust, len(exclude))
		}
		return target{}, fmt.Errorf("%w: %q: %s", ErrNoProvider, st.Profile, why)
	}
	slices.SortFunc(cands, func(x, y cand) int {
		if c := cmp.Compare(y.trust, x.trust); c != 0 {
			return c
		}
		if c := cmp.Compare(y.free, x.free); c != 0 {
			return c
		}
		return cmp.Compare(x.id, y.id)
	})
	return target{peer: cands[0].id, maxBudget: cands[0].max}, nil
}

// Check validates s (Validate) and then that every profile it names is
// offered by this node or by a known peer (asking the finder's candidates
// when nothing is known yet). It returns every problem at once.
func (c *Coordinator) Check(ctx context.Context, s *Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	offered := map[string]bool{}
	for _, p := range c.eng.Profiles() {
		offered[p.Name] = true
	}
	var errs []error
	steps := s.steps()
	for i, st := range steps {
		if offered[st.Profile] {
			continue
		}
		for _, a := range c.known(ctx, st.Profile, true) {
			for _, p := range a.Profiles {
				offered[p.Name] = true
			}
		}
		if offered[st.Profile] {
			continue
		}
		field := "assemble.profile"
		if i < len(s.Subtasks) {
			field = fmt.Sprintf("subtasks[%d].profile", i)
		}
		errs = append(errs, fmt.Errorf("%w: %w: %s: %q is offered neither by this node nor by any known peer", ErrInvalid, ErrUnknownProfile, field, st.Profile))
	}
	return errors.Join(errs...)
}

// excluded returns the providers of a subtask's failed attempts.
func excluded(s store.PlanSubtask, self peer.ID) map[peer.ID]bool {
	out := map[peer.ID]bool{}
	for _, a := range s.Attempts {
		if a.State == protocol.StateCompleted.String() || a.Delegation.IsZero() && a.State == attemptDispatching {
			continue
		}
		switch {
		case a.Local:
			out[self] = true
		case a.Peer != "":
			out[a.Peer] = true
		}
	}
	return out
}
