package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
)

// Capability is a peer's signed capability assertion exactly as received,
// kept until it expires. The store holds bytes, not trust: whoever reads
// one back verifies it again (protocol.VerifyCapability).
type Capability struct {
	Peer       peer.ID
	Signed     crypto.Assertion
	Source     string // "query" (a capability_response) or "gossip" (an advert)
	ReceivedAt time.Time
	ExpiresAt  time.Time
}

type capabilityRecord struct {
	Peer       string `json:"peer"`
	Payload    []byte `json:"payload"`
	Signature  []byte `json:"signature"`
	Source     string `json:"source"`
	ReceivedAt int64  `json:"received_at_ns"`
	ExpiresAt  int64  `json:"expires_at_ns"`
}

// PutCapability stores c in place of p's previous one, and lets badger drop
// it once it expires. An already expired c is refused with ErrInvalid.
func (s *Store) PutCapability(c Capability) error {
	if err := validPeerID(c.Peer); err != nil {
		return err
	}
	ttl := c.ExpiresAt.Sub(s.clock())
	if ttl <= 0 {
		return fmt.Errorf("%w: capability of %s expired at %v", ErrInvalid, c.Peer, c.ExpiresAt)
	}
	r := capabilityRecord{
		Peer: c.Peer.String(), Payload: c.Signed.Payload, Signature: c.Signed.Signature, Source: c.Source,
		ReceivedAt: nanos(c.ReceivedAt), ExpiresAt: nanos(c.ExpiresAt),
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("store: encode capability of %s: %w", c.Peer, err)
	}
	if err := s.checkSize(b); err != nil {
		return err
	}
	return s.update([]string{string(capabilityKey(c.Peer))}, func(txn *wtxn) error {
		return txn.SetEntry(badger.NewEntry(capabilityKey(c.Peer), b).WithTTL(ttl))
	})
}

// ListCapabilities returns every stored capability that has not expired,
// sorted by peer.
func (s *Store) ListCapabilities() ([]Capability, error) {
	now := s.clock()
	var out []Capability
	err := s.view(func(txn *wtxn) error {
		return scanPrefix(txn, []byte(prefixCapability), nil, false, func(item *badger.Item) error {
			var r capabilityRecord
			if err := item.Value(func(b []byte) error { return decodeJSON(b, &r, "capability") }); err != nil {
				return err
			}
			id, err := peer.Decode(r.Peer)
			if err != nil {
				return fmt.Errorf("%w: capability record peer %q: %v", ErrCorrupt, r.Peer, err)
			}
			c := Capability{
				Peer: id, Signed: crypto.Assertion{Payload: r.Payload, Signature: r.Signature}, Source: r.Source,
				ReceivedAt: fromNanos(r.ReceivedAt), ExpiresAt: fromNanos(r.ExpiresAt),
			}
			if now.Before(c.ExpiresAt) {
				out = append(out, c)
			}
			return nil
		})
	})
	return out, err
}
