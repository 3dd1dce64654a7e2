package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
)

// Context state, both sides of a conversation (docs/contexts.md):
//
//   - as a requester, a Context lists the delegations that joined a context
//     id, in order: what the delegation engine reads to find the provider
//     that holds the context's state and to build the history it carries
//     when the context moves;
//   - as a provider, a PeerContext holds the turns this node served (or was
//     handed) for one requester's context, keyed by (requester, context
//     id): a context id is the requester's free choice, so another peer
//     naming the same one reaches a different record, empty.
//
// Both are bounded (ContextLimits). Per record, the bound applies on every
// write: the oldest delegations or turns are dropped. Across records,
// PruneContexts evicts the least recently updated ones over the count and,
// on the provider side, those unused past the TTL; the node runs it from
// its maintenance loop, and a provider context past its TTL already reads
// as absent before it is pruned.

// ContextLimits bound the context state a store keeps. Zero fields take
// the defaults below.
type ContextLimits struct {
	// MaxContexts is the requester contexts kept; past it the least
	// recently updated are evicted.
	MaxContexts int
	// MaxDelegations is the delegations one requester context lists; past
	// it the oldest are dropped from the list (not from the store).
	MaxDelegations int
	// MaxPeerContexts is the provider contexts kept, all requesters
	// together; past it the least recently updated are evicted.
	MaxPeerContexts int
	// MaxTurns and MaxTurnBytes bound one provider context: the oldest
	// turns are dropped until both hold. Bytes count the turns' data.
	MaxTurns     int
	MaxTurnBytes int
	// TTL is how long a provider context is kept after its last turn.
	TTL time.Duration
}

// The context bounds' defaults; node/config reads them.
const (
	DefaultMaxContexts     = 4096
	DefaultMaxDelegations  = 256
	DefaultMaxPeerContexts = 1024
	DefaultMaxTurns        = 64
	DefaultMaxTurnBytes    = 256 << 10
	DefaultContextTTL      = 24 * time.Hour
)

func (l ContextLimits) withDefaults(maxValue int) ContextLimits {
	or := func(v, def int) int {
		if v <= 0 {
			return def
		}
		return v
	}
	l.MaxContexts = or(l.MaxContexts, DefaultMaxContexts)
	l.MaxDelegations = or(l.MaxDelegations, DefaultMaxDelegations)
	l.MaxPeerContexts = or(l.MaxPeerContexts, DefaultMaxPeerContexts)
	l.MaxTurns = or(l.MaxTurns, DefaultMaxTurns)
	// A record must fit one value, with room for its turns' framing.
	l.MaxTurnBytes = min(or(l.MaxTurnBytes, DefaultMaxTurnBytes), maxValue/2)
	if l.TTL <= 0 {
		l.TTL = DefaultContextTTL
	}
	return l
}

// ContextLimits returns the bounds this store applies, defaults filled in.
func (s *Store) ContextLimits() ContextLimits { return s.ctxLimits }

// Context groups the delegations of one conversation (A2A context_id), in
// the order they joined it.
type Context struct {
	ID          protocol.ContextID
	Delegations []protocol.DelegationID
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

type contextRecord struct {
	ID          string                  `json:"id"`
	Delegations []protocol.DelegationID `json:"delegations"`
	CreatedAt   int64                   `json:"created_at_ns"`
	UpdatedAt   int64                   `json:"updated_at_ns"`
}

func validContextID(id protocol.ContextID) error {
	if id == "" {
		return fmt.Errorf("%w: empty context id", ErrInvalid)
	}
	if len(id) > protocol.MaxContextIDLen {
		return fmt.Errorf("%w: context id of %d bytes exceeds %d", ErrInvalid, len(id), protocol.MaxContextIDLen)
	}
	return nil
}

// AddToContext adds a delegation to a context, creating the context if
// needed. Adding one that is already there changes nothing. CreateDelegation
// already does this for a delegation with a ContextID.
func (s *Store) AddToContext(ctxID protocol.ContextID, id protocol.DelegationID) error {
	if err := validContextID(ctxID); err != nil {
		return err
	}
	if id.IsZero() {
		return fmt.Errorf("%w: zero delegation id", ErrInvalid)
	}
	return s.update([]string{string(contextKey(ctxID))}, func(txn *wtxn) error {
		return s.addToContext(txn, ctxID, id)
	})
}

func (s *Store) addToContext(txn *wtxn, ctxID protocol.ContextID, id protocol.DelegationID) error {
	now := nanos(s.clock())
	var r contextRecord
	err := getJSON(txn, contextKey(ctxID), &r, "context "+string(ctxID))
	switch {
	case errors.Is(err, ErrNotFound):
		r = contextRecord{ID: string(ctxID), CreatedAt: now}
	case err != nil:
		return err
	case slices.Contains(r.Delegations, id):
		return nil
	default:
		if err := txn.Delete(contextIdxKey(r.UpdatedAt, ctxID)); err != nil {
			return fmt.Errorf("store: index context %s: %w", ctxID, err)
		}
	}
	r.Delegations = append(r.Delegations, id)
	if n := s.ctxLimits.MaxDelegations; len(r.Delegations) > n {
		r.Delegations = slices.Clone(r.Delegations[len(r.Delegations)-n:])
	}
	r.UpdatedAt = now
	if err := txn.Set(contextIdxKey(now, ctxID), []byte{1}); err != nil {
		return fmt.Errorf("store: index context %s: %w", ctxID, err)
	}
	return setJSON(txn, contextKey(ctxID), r, "context "+string(ctxID))
}

// GetContext returns a context or ErrNotFound.
func (s *Store) GetContext(id protocol.ContextID) (Context, error) {
	var r contextRecord
	err := s.view(func(txn *wtxn) error {
		return getJSON(txn, contextKey(id), &r, "context "+string(id))
	})
	if err != nil {
		return Context{}, err
	}
	return Context{
		ID: protocol.ContextID(r.ID), Delegations: r.Delegations,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt),
	}, nil
}

// PeerContext is what this node, as a provider, keeps of one requester's
// context: the turns it served or was handed, oldest first.
type PeerContext struct {
	Peer      peer.ID
	ID        protocol.ContextID
	Turns     []ContextTurn
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Bytes is the size of the turns' data, what MaxTurnBytes bounds.
func (c PeerContext) Bytes() int {
	n := 0
	for _, t := range c.Turns {
		n += len(t.Data)
	}
	return n
}

// ContextTurn is one turn of a provider context. Data is opaque to the
// store: the delegation engine's encoding of the turn.
type ContextTurn struct {
	Delegation protocol.DelegationID
	At         time.Time
	Data       []byte
}

// GetPeerContext returns requester p's context id as this provider keeps
// it, or ErrNotFound: never kept, evicted, or unused past the TTL.
func (s *Store) GetPeerContext(p peer.ID, id protocol.ContextID) (PeerContext, error) {
	if err := validPeerContext(p, id); err != nil {
		return PeerContext{}, err
	}
	var c PeerContext
	err := s.view(func(txn *wtxn) error {
		var err error
		c, err = s.getPeerContext(txn, p, id)
		return err
	})
	return c, err
}

func validPeerContext(p peer.ID, id protocol.ContextID) error {
	if len(p) > protocol.MaxPeerIDLen {
		return fmt.Errorf("%w: peer id of %d bytes", ErrInvalid, len(p))
	}
	if err := validPeerID(p); err != nil {
		return err
	}
	return validContextID(id)
}

func (s *Store) getPeerContext(txn *wtxn, p peer.ID, id protocol.ContextID) (PeerContext, error) {
	c, found, err := rawPeerContext(txn, p, id)
	switch {
	case err != nil:
		return PeerContext{}, err
	case !found:
		return PeerContext{}, fmt.Errorf("%w: context %s of %s", ErrNotFound, id, p)
	case !s.clock().Before(c.UpdatedAt.Add(s.ctxLimits.TTL)):
		return PeerContext{}, fmt.Errorf("%w: context %s of %s (expired)", ErrNotFound, id, p)
	}
	return c, nil
}

// rawPeerContext reads a provider context whatever its age.
func rawPeerContext(txn *wtxn, p peer.ID, id protocol.ContextID) (PeerContext, bool, error) {
	what := "context " + string(id) + " of " + p.String()
	item, err := txn.Get(peerContextKey(p, id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return PeerContext{}, false, nil
	}
	if err != nil {
		return PeerContext{}, false, fmt.Errorf("store: read %s: %w", what, err)
	}
	var c PeerContext
	err = item.Value(func(b []byte) error {
		c, err = decodePeerContext(b, what)
		return err
	})
	if err != nil {
		return PeerContext{}, false, err
	}
	if c.Peer != p || c.ID != id {
		return PeerContext{}, false, fmt.Errorf("%w: %s holds %s of %s", ErrCorrupt, what, c.ID, c.Peer)
	}
	return c, true, nil
}

// AddPeerContextTurns appends turns to requester p's context id, creating
// it if needed; with replace, the turns kept so far are dropped first (the
// requester carried the context's history, which supersedes them). The
// oldest turns are then dropped until MaxTurns and MaxTurnBytes hold; a
// turn larger than MaxTurnBytes is ErrInvalid. It returns the context as
// stored.
func (s *Store) AddPeerContextTurns(p peer.ID, id protocol.ContextID, replace bool, turns ...ContextTurn) (PeerContext, error) {
	if err := validPeerContext(p, id); err != nil {
		return PeerContext{}, err
	}
	for _, t := range turns {
		if len(t.Data) > s.ctxLimits.MaxTurnBytes {
			return PeerContext{}, fmt.Errorf("%w: context turn of %d bytes exceeds the %d a context keeps",
				ErrInvalid, len(t.Data), s.ctxLimits.MaxTurnBytes)
		}
	}
	var out PeerContext
	err := s.update([]string{string(peerContextKey(p, id))}, func(txn *wtxn) error {
		now := s.clock()
		c, found, err := rawPeerContext(txn, p, id)
		if err != nil {
			return err
		}
		if found {
			if err := txn.Delete(peerContextIdxKey(nanos(c.UpdatedAt), p, id)); err != nil {
				return fmt.Errorf("store: index context %s: %w", id, err)
			}
		}
		if !found || !now.Before(c.UpdatedAt.Add(s.ctxLimits.TTL)) {
			c = PeerContext{Peer: p, ID: id, CreatedAt: now} // new, or expired: start afresh
		}
		kept := c.Turns
		if replace {
			kept = nil
		}
		c.Turns = make([]ContextTurn, 0, len(kept)+len(turns))
		c.Turns = append(append(c.Turns, kept...), turns...)
		for i := len(kept); i < len(c.Turns); i++ {
			if c.Turns[i].At.IsZero() {
				c.Turns[i].At = now
			}
		}
		for len(c.Turns) > s.ctxLimits.MaxTurns || c.Bytes() > s.ctxLimits.MaxTurnBytes {
			c.Turns = c.Turns[1:]
		}
		c.UpdatedAt = now
		b := c.encode()
		if err := s.checkSize(b); err != nil {
			return err
		}
		if err := txn.Set(peerContextKey(p, id), b); err != nil {
			return fmt.Errorf("store: write context %s: %w", id, err)
		}
		if err := txn.Set(peerContextIdxKey(nanos(now), p, id), []byte{1}); err != nil {
			return fmt.Errorf("store: index context %s: %w", id, err)
		}
		out = c
		return nil
	})
	return out, err
}

// PruneContexts evicts the least recently updated requester contexts past
// MaxContexts, and the provider contexts past MaxPeerContexts or unused
// for the TTL. It returns how many it removed.
func (s *Store) PruneContexts() (int, error) {
	n1, err := s.pruneIndex(prefixIdxContext, s.ctxLimits.MaxContexts, 0)
	if err != nil {
		return n1, err
	}
	cutoff := nanos(s.clock().Add(-s.ctxLimits.TTL))
	n2, err := s.pruneIndex(prefixIdxPeerCtx, s.ctxLimits.MaxPeerContexts, cutoff)
	return n1 + n2, err
}

// ctxPruneBatch bounds the records one prune transaction deletes.
const ctxPruneBatch = 256

// pruneIndex walks an update-time index oldest first and removes the
// records past keep, and those updated before cutoff (when not 0). An
// index key is <prefix><8-byte ns><suffix>, and its record's key is
// recordPrefix(prefix)+suffix.
func (s *Store) pruneIndex(prefix string, keep int, cutoff int64) (int, error) {
	var total int
	err := s.view(func(txn *wtxn) error {
		return scanPrefix(txn, []byte(prefix), nil, false, func(*badger.Item) error {
			total++
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	removed := 0
	for {
		var victims [][]byte
		err := s.view(func(txn *wtxn) error {
			return scanPrefix(txn, []byte(prefix), nil, false, func(item *badger.Item) error {
				k := item.Key()
				if len(k) < len(prefix)+8 {
					return fmt.Errorf("%w: index key %q", ErrCorrupt, k)
				}
				at := int64(beUint64(k[len(prefix):]))
				if total-removed-len(victims) <= keep && (cutoff == 0 || at >= cutoff) {
					return errStop
				}
				victims = append(victims, item.KeyCopy(nil))
				if len(victims) == ctxPruneBatch {
					return errStop
				}
				return nil
			})
		})
		if err != nil || len(victims) == 0 {
			return removed, err
		}
		var locks []string
		for _, v := range victims {
			locks = append(locks, string(indexedRecordKey(prefix, v)))
		}
		err = s.update(locks, func(txn *wtxn) error {
			for _, v := range victims {
				// The record may have moved on since the scan (a newer
				// index key): then only this stale entry goes.
				if _, err := txn.Get(v); errors.Is(err, badger.ErrKeyNotFound) {
					continue
				}
				if err := txn.Delete(v); err != nil {
					return err
				}
				if err := txn.Delete(indexedRecordKey(prefix, v)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return removed, fmt.Errorf("store: prune contexts: %w", err)
		}
		removed += len(victims)
	}
}

// indexedRecordKey is the record an update-time index key points at.
func indexedRecordKey(prefix string, idx []byte) []byte {
	suffix := idx[len(prefix)+8:]
	rec := prefixContext
	if prefix == prefixIdxPeerCtx {
		rec = prefixPeerCtx
	}
	return append([]byte(rec), suffix...)
}

// The provider context record, binary (record.go's codec): the version,
// peer, context id, created and updated (unix ns), the turn count, then
// each turn's delegation ID, time and data.
func (c PeerContext) encode() []byte {
	w := recordWriter{b: make([]byte, 0, 64+len(c.ID)+c.Bytes()+len(c.Turns)*32)}
	w.b = append(w.b, recordV1)
	w.str(string(c.Peer))
	w.str(string(c.ID))
	w.varint(nanos(c.CreatedAt))
	w.varint(nanos(c.UpdatedAt))
	w.uvarint(uint64(len(c.Turns)))
	for _, t := range c.Turns {
		w.id(t.Delegation)
		w.varint(nanos(t.At))
		w.bytes(t.Data)
	}
	return w.b
}

// Context keys (see keys.go for the whole key space).
const (
	prefixPeerCtx    = "pctx/"
	prefixIdxContext = "idx/ctxupd/"
	prefixIdxPeerCtx = "idx/pctxupd/"
)

func contextIdxKey(updatedNanos int64, id protocol.ContextID) []byte {
	return append(append([]byte(prefixIdxContext), be64(uint64(updatedNanos))...), id...)
}

// peerContextSuffix is <peer ID length><peer ID bytes><context id>: peer
// IDs are raw multihash bytes of varying length and may hold any byte.
func peerContextSuffix(p peer.ID, id protocol.ContextID) []byte {
	b := append([]byte{byte(len(p))}, p...)
	return append(b, id...)
}

func peerContextKey(p peer.ID, id protocol.ContextID) []byte {
	return append([]byte(prefixPeerCtx), peerContextSuffix(p, id)...)
}

func peerContextIdxKey(updatedNanos int64, p peer.ID, id protocol.ContextID) []byte {
	k := append([]byte(prefixIdxPeerCtx), be64(uint64(updatedNanos))...)
	return append(k, peerContextSuffix(p, id)...)
}

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// minTurnBytes is the least a turn takes in a record, which bounds the
// count a record may claim before any turn is allocated.
const minTurnBytes = 16 + 1 + 1

func decodePeerContext(b []byte, what string) (PeerContext, error) {
	if len(b) == 0 || b[0] != recordV1 {
		return PeerContext{}, fmt.Errorf("%w: decode %s: unknown record version", ErrCorrupt, what)
	}
	r := recordReader{b: b[1:]}
	var c PeerContext
	c.Peer = peer.ID(r.str())
	c.ID = protocol.ContextID(r.str())
	c.CreatedAt = fromNanos(r.varint())
	c.UpdatedAt = fromNanos(r.varint())
	n := r.uvarint()
	if n > uint64(len(r.b)/minTurnBytes) {
		r.fail(fmt.Errorf("%d turns in %d bytes", n, len(r.b)))
	}
	if r.err == nil && n > 0 {
		c.Turns = make([]ContextTurn, 0, n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		t := ContextTurn{Delegation: r.id(), At: fromNanos(r.varint())}
		t.Data = bytes.Clone(r.bytes())
		c.Turns = append(c.Turns, t)
	}
	if err := r.end(what); err != nil {
		return PeerContext{}, err
	}
	if err := validPeerContext(c.Peer, c.ID); err != nil {
		return PeerContext{}, fmt.Errorf("%w: decode %s: %v", ErrCorrupt, what, err)
	}
	return c, nil
}

// migrate2to3 indexes the requester contexts of a schema version 2 store
// by update time, so that PruneContexts can bound them, then stamps
// version 3. It can stop and run again: setting an index key twice is
// harmless, and the version is stamped last.
func (s *Store) migrate2to3(where string) error {
	start := []byte(prefixContext)
	for {
		var keys [][]byte
		err := s.view(func(txn *wtxn) error {
			return scanPrefix(txn, []byte(prefixContext), start, false, func(item *badger.Item) error {
				start = append(item.KeyCopy(nil), 0)
				var r contextRecord
				if err := item.Value(func(b []byte) error {
					return decodeJSON(b, &r, fmt.Sprintf("%q", item.Key()))
				}); err != nil {
					return err
				}
				keys = append(keys, contextIdxKey(r.UpdatedAt, protocol.ContextID(r.ID)))
				if len(keys) == migrateBatch {
					return errStop
				}
				return nil
			})
		})
		if err != nil {
			return fmt.Errorf("store: migrate %s to schema 3: %w", where, err)
		}
		if len(keys) == 0 {
			break
		}
		if err := s.update(nil, func(txn *wtxn) error {
			for _, k := range keys {
				if err := txn.Set(k, []byte{1}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("store: migrate %s to schema 3: %w", where, err)
		}
	}
	return s.update(nil, func(txn *wtxn) error {
		return txn.Set([]byte(keySchema), be64(3))
	})
}
