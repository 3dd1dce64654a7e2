package store

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/kithmesh/kith/protocol"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Access is a peer's place on the node's allow and deny lists. The zero
// value, AccessNone, means neither: the trust policy alone decides.
type Access uint8

const (
	AccessNone Access = iota
	AccessAllow
	AccessDeny
)

var accessNames = [...]string{"none", "allow", "deny"}

func (a Access) String() string {
	if int(a) < len(accessNames) {
		return accessNames[a]
	}
	return fmt.Sprintf("access(%d)", uint8(a))
}

// MarshalText implements encoding.TextMarshaler.
func (a Access) MarshalText() ([]byte, error) {
	if int(a) >= len(accessNames) {
		return nil, fmt.Errorf("%w: access %d", ErrInvalid, uint8(a))
	}
	return []byte(accessNames[a]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Access) UnmarshalText(b []byte) error {
	for i, n := range accessNames {
		if n == string(b) {
			*a = Access(i)
			return nil
		}
	}
	return fmt.Errorf("%w: access %q (want none, allow or deny)", ErrInvalid, b)
}

// ParseAccess parses "none", "allow" or "deny".
func ParseAccess(s string) (Access, error) {
	var a Access
	err := a.UnmarshalText([]byte(s))
	return a, err
}

// Peer is what the node remembers about another node.
type Peer struct {
	ID      peer.ID
	Addrs   []string // multiaddrs in text form
	Sources []string // how it was found: "static", "mdns", "dnssd", "dht", "gossip"
	// Trust and Access change only through SetTrust and SetAccess, which
	// write the audit log in the same transaction; PutPeer and UpdatePeer
	// refuse to change them so that no decision escapes the log.
	Trust    protocol.TrustLevel
	Access   Access
	LastSeen time.Time
	AddedAt  time.Time
}

type peerRecord struct {
	ID       string              `json:"id"`
	Addrs    []string            `json:"addrs,omitempty"`
	Sources  []string            `json:"sources,omitempty"`
	Trust    protocol.TrustLevel `json:"trust"`
	Access   Access              `json:"access"`
	LastSeen int64               `json:"last_seen_ns,omitempty"`
	AddedAt  int64               `json:"added_at_ns,omitempty"`
}

func (p Peer) record() peerRecord {
	return peerRecord{
		ID: p.ID.String(), Addrs: p.Addrs, Sources: p.Sources, Trust: p.Trust, Access: p.Access,
		LastSeen: nanos(p.LastSeen), AddedAt: nanos(p.AddedAt),
	}
}

func (r peerRecord) peer() (Peer, error) {
	id, err := peer.Decode(r.ID)
	if err != nil {
		return Peer{}, fmt.Errorf("%w: peer record id %q: %v", ErrCorrupt, r.ID, err)
	}
	return Peer{
		ID: id, Addrs: r.Addrs, Sources: r.Sources, Trust: r.Trust, Access: r.Access,
		LastSeen: fromNanos(r.LastSeen), AddedAt: fromNanos(r.AddedAt),
	}, nil
}

// validPeerID refuses an empty ID or one that is not a multihash: records
// hold the ID's text form, and one that does not parse back would make the
// record, and every list that meets it, unreadable.
func validPeerID(id peer.ID) error {
	if err := id.Validate(); err != nil {
		return fmt.Errorf("%w: peer id: %v", ErrInvalid, err)
	}
	if _, err := peer.IDFromBytes([]byte(id)); err != nil {
		return fmt.Errorf("%w: peer id %q: %v", ErrInvalid, string(id), err)
	}
	return nil
}

func getPeer(txn *wtxn, id peer.ID) (Peer, error) {
	var r peerRecord
	if err := getJSON(txn, peerKey(id), &r, "peer "+id.String()); err != nil {
		return Peer{}, err
	}
	return r.peer()
}

// getOrNewPeer returns the stored peer, or a fresh untrusted one added now.
func (s *Store) getOrNewPeer(txn *wtxn, id peer.ID) (Peer, error) {
	p, err := getPeer(txn, id)
	if errors.Is(err, ErrNotFound) {
		return Peer{ID: id, AddedAt: s.clock()}, nil
	}
	return p, err
}

func putPeer(txn *wtxn, p Peer) error {
	if _, err := p.Trust.MarshalText(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := p.Access.MarshalText(); err != nil {
		return err
	}
	return setJSON(txn, peerKey(p.ID), p.record(), "peer "+p.ID.String())
}

// PutPeer creates or replaces p's address-book fields. A zero AddedAt keeps
// the stored one (or is set to now for a new peer). Trust and Access must
// equal what is stored (untrusted/none for a new peer): they change only
// through SetTrust and SetAccess.
func (s *Store) PutPeer(p Peer) error {
	if err := validPeerID(p.ID); err != nil {
		return err
	}
	return s.update([]string{string(peerKey(p.ID))}, func(txn *wtxn) error {
		old, err := s.getOrNewPeer(txn, p.ID)
		if err != nil {
			return err
		}
		if err := checkUnaudited(old, p); err != nil {
			return err
		}
		if p.AddedAt.IsZero() {
			p.AddedAt = old.AddedAt
		}
		return putPeer(txn, p)
	})
}

// checkUnaudited refuses a trust or access change made outside
// SetTrust/SetAccess.
func checkUnaudited(old, p Peer) error {
	if p.ID != old.ID {
		return fmt.Errorf("%w: peer id changed from %s to %s", ErrInvalid, old.ID, p.ID)
	}
	if p.Trust != old.Trust {
		return fmt.Errorf("%w: peer %s trust %s→%s: use SetTrust, which audits it", ErrInvalid, p.ID, old.Trust, p.Trust)
	}
	if p.Access != old.Access {
		return fmt.Errorf("%w: peer %s access %s→%s: use SetAccess, which audits it", ErrInvalid, p.ID, old.Access, p.Access)
	}
	return nil
}

// GetPeer returns the stored peer or ErrNotFound.
func (s *Store) GetPeer(id peer.ID) (Peer, error) {
	p, found, ok, gen := s.peers.get(id)
	switch {
	case ok && found:
		return p, nil
	case ok:
		return Peer{}, fmt.Errorf("%w: peer %s", ErrNotFound, id)
	}
	err := s.view(func(txn *wtxn) error {
		var err error
		p, err = getPeer(txn, id)
		return err
	})
	switch {
	case err == nil:
		s.peers.put(id, p, true, gen)
	case errors.Is(err, ErrNotFound):
		s.peers.put(id, Peer{}, false, gen)
	}
	return p, err
}

// ListPeers returns every stored peer, sorted by ID.
func (s *Store) ListPeers() ([]Peer, error) {
	var out []Peer
	err := s.view(func(txn *wtxn) error {
		return scanPrefix(txn, []byte(prefixPeer), nil, false, func(item *badger.Item) error {
			var r peerRecord
			if err := item.Value(func(b []byte) error { return decodeJSON(b, &r, "peer") }); err != nil {
				return err
			}
			p, err := r.peer()
			if err != nil {
				return err
			}
			out = append(out, p)
			return nil
		})
	})
	// Keys are ordered by ID bytes already; sorting again keeps the promise
	// independent of the key layout.
	slices.SortFunc(out, func(a, b Peer) int { return cmp.Compare(a.ID, b.ID) })
	return out, err
}

// UpdatePeer applies fn to the stored peer (a new untrusted one if missing)
// and stores the result, atomically. fn may run more than once and must not
// change ID, Trust or Access, nor call the Store.
func (s *Store) UpdatePeer(id peer.ID, fn func(*Peer) error) (Peer, error) {
	if err := validPeerID(id); err != nil {
		return Peer{}, err
	}
	var out Peer
	err := s.update([]string{string(peerKey(id))}, func(txn *wtxn) error {
		old, err := s.getOrNewPeer(txn, id)
		if err != nil {
			return err
		}
		p := old
		p.Addrs, p.Sources = slices.Clone(old.Addrs), slices.Clone(old.Sources)
		if err := fn(&p); err != nil {
			return err
		}
		if err := checkUnaudited(old, p); err != nil {
			return err
		}
		out = p
		return putPeer(txn, p)
	})
	return out, err
}

// SetTrust sets a peer's trust level (adding the peer if unknown) and
// appends an audit entry naming origin (who asked: "cli", "api", "config"),
// in one transaction: the change and its record are both there or neither.
func (s *Store) SetTrust(id peer.ID, level protocol.TrustLevel, origin string) error {
	if _, err := level.MarshalText(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return s.setAudited(id, AuditTrust, origin, func(p *Peer) (from, to string) {
		from, p.Trust = p.Trust.String(), level
		return from, level.String()
	})
}

// SetAccess puts a peer on the allow or deny list, or neither (adding the
// peer if unknown), and appends an audit entry in the same transaction.
func (s *Store) SetAccess(id peer.ID, access Access, origin string) error {
	if _, err := access.MarshalText(); err != nil {
		return err
	}
	return s.setAudited(id, AuditAccess, origin, func(p *Peer) (from, to string) {
		from, p.Access = p.Access.String(), access
		return from, access.String()
	})
}

// RaiseTrust sets a peer's trust to level (adding the peer if unknown) and
// audits it, unless the peer is denied or already holds level or more; it
// reports whether it changed anything. It is how a peer the user named
// (kith peers add, kith peers allow) becomes verified without undoing a
// higher trust or a deny the user chose.
func (s *Store) RaiseTrust(id peer.ID, level protocol.TrustLevel, origin string) (raised bool, err error) {
	if _, err := level.MarshalText(); err != nil {
		return false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := validPeerID(id); err != nil {
		return false, err
	}
	err = s.update([]string{string(peerKey(id)), lockAudit}, func(txn *wtxn) error {
		raised = false
		p, err := s.getOrNewPeer(txn, id)
		if err != nil {
			return err
		}
		if p.Access == AccessDeny || p.Trust >= level {
			return nil
		}
		from := p.Trust.String()
		p.Trust = level
		if err := putPeer(txn, p); err != nil {
			return err
		}
		raised = true
		return s.appendAudit(txn, AuditEntry{Peer: id, Action: AuditTrust, From: from, To: level.String(), Origin: origin})
	})
	return raised, err
}

func (s *Store) setAudited(id peer.ID, action, origin string, change func(*Peer) (from, to string)) error {
	if err := validPeerID(id); err != nil {
		return err
	}
	return s.update([]string{string(peerKey(id)), lockAudit}, func(txn *wtxn) error {
		p, err := s.getOrNewPeer(txn, id)
		if err != nil {
			return err
		}
		from, to := change(&p)
		if err := putPeer(txn, p); err != nil {
			return err
		}
		return s.appendAudit(txn, AuditEntry{Peer: id, Action: action, From: from, To: to, Origin: origin})
	})
}

// DeletePeer forgets a peer, trust and access included, and records who did
// it in the audit log. It returns ErrNotFound for an unknown peer.
func (s *Store) DeletePeer(id peer.ID, origin string) error {
	if err := validPeerID(id); err != nil {
		return err
	}
	return s.update([]string{string(peerKey(id)), lockAudit}, func(txn *wtxn) error {
		p, err := getPeer(txn, id)
		if err != nil {
			return err
		}
		if err := txn.Delete(peerKey(id)); err != nil {
			return fmt.Errorf("store: delete peer %s: %w", id, err)
		}
		return s.appendAudit(txn, AuditEntry{
			Peer: id, Action: AuditDelete, Origin: origin,
			From: "trust=" + p.Trust.String() + " access=" + p.Access.String(),
		})
	})
}
