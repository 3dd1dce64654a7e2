package config

import (
	"fmt"
	"time"

	"github.com/kithmesh/kith/store"
)

// Contexts is the [contexts] table: how much conversation state this node
// keeps (docs/contexts.md). As a requester it lists each context's
// delegations; as a provider it keeps, per requester and context id, the
// turns it served, and hands them to the next task of the context.
type Contexts struct {
	// MaxContexts is how many contexts this node keeps as a requester; past
	// it the least recently used are forgotten (their delegations stay).
	// Default: 4096.
	MaxContexts int `toml:"max_contexts"`

	// MaxDelegations is how many delegations one context lists, the newest.
	// Default: 256.
	MaxDelegations int `toml:"max_delegations"`

	// MaxPeerContexts is how many contexts this node keeps as a provider,
	// all requesters together; past it the least recently used go.
	// Default: 1024.
	MaxPeerContexts int `toml:"max_peer_contexts"`

	// MaxTurns is how many turns one provider context keeps, the newest.
	// Default: 64.
	MaxTurns int `toml:"max_turns"`

	// MaxTurnBytes bounds the turns one provider context keeps, in bytes;
	// a history carried in an offer larger than this is rejected
	// payload_too_large, and a requester carries at most this much.
	// Default: 262144 (256 KiB).
	MaxTurnBytes int `toml:"max_turn_bytes"`

	// TTL is how long a provider context is kept after its last turn; as a
	// requester, a provider whose last turn in a context is older than this
	// is taken to have lost the state, and is sent the history again.
	// Default: "24h".
	TTL Duration `toml:"ttl"`
}

func defaultContexts() Contexts {
	return Contexts{
		MaxContexts: store.DefaultMaxContexts, MaxDelegations: store.DefaultMaxDelegations,
		MaxPeerContexts: store.DefaultMaxPeerContexts, MaxTurns: store.DefaultMaxTurns,
		MaxTurnBytes: store.DefaultMaxTurnBytes, TTL: Duration(store.DefaultContextTTL),
	}
}

// StoreLimits are the bounds as the store takes them.
func (c Contexts) StoreLimits() store.ContextLimits {
	return store.ContextLimits{
		MaxContexts: c.MaxContexts, MaxDelegations: c.MaxDelegations, MaxPeerContexts: c.MaxPeerContexts,
		MaxTurns: c.MaxTurns, MaxTurnBytes: c.MaxTurnBytes, TTL: time.Duration(c.TTL),
	}
}

func (c Contexts) validate(ps *problems) {
	for _, v := range []struct {
		key string
		n   int
	}{
		{"contexts.max_contexts", c.MaxContexts}, {"contexts.max_delegations", c.MaxDelegations},
		{"contexts.max_peer_contexts", c.MaxPeerContexts}, {"contexts.max_turns", c.MaxTurns},
		{"contexts.max_turn_bytes", c.MaxTurnBytes},
	} {
		if v.n < 1 {
			ps.add(v.key, "%d; want at least 1", v.n)
		}
	}
	positive(ps, "contexts.ttl", c.TTL)
}

func (w *fileWriter) contexts(c Contexts) {
	w.line("[contexts]")
	w.comment("Contexts this node keeps as a requester, and delegations listed per context;")
	w.comment("past them the least recently used context, or the oldest delegation, goes.")
	w.show("max_contexts", fmt.Sprint(c.MaxContexts))
	w.show("max_delegations", fmt.Sprint(c.MaxDelegations))
	w.comment("As a provider: contexts kept (all requesters together), and per context the")
	w.comment("turns and bytes kept, the newest; a context unused for ttl is dropped.")
	w.show("max_peer_contexts", fmt.Sprint(c.MaxPeerContexts))
	w.show("max_turns", fmt.Sprint(c.MaxTurns))
	w.show("max_turn_bytes", fmt.Sprint(c.MaxTurnBytes))
	w.show("ttl", tomlString(c.TTL.String()))
	w.blank()
}
