package store

import (
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Audit actions.
const (
	AuditTrust  = "trust"  // From and To are trust levels
	AuditAccess = "access" // From and To are access values
	AuditDelete = "delete" // From is "trust=<level> access=<access>", To is empty
)

// AuditEntry records one trust, access or delete decision about a peer.
// Entries are never changed or removed; Seq orders them (strictly
// increasing, in commit order).
type AuditEntry struct {
	Seq    uint64
	At     time.Time
	Peer   peer.ID
	Action string
	From   string
	To     string
	Origin string // who asked: "cli", "api", "config", …
}

type auditRecord struct {
	Seq    uint64 `json:"seq"`
	At     int64  `json:"at_ns"`
	Peer   string `json:"peer"`
	Action string `json:"action"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	Origin string `json:"origin,omitempty"`
}

// appendAudit writes e with the next audit sequence number. Callers hold
// lockAudit, so entries are numbered in the order their transactions
// commit; the counter read would make concurrent appenders conflict anyway.
func (s *Store) appendAudit(txn *wtxn, e AuditEntry) error {
	seq, err := nextSeq(txn, []byte(keyAuditSeq))
	if err != nil {
		return err
	}
	r := auditRecord{
		Seq: seq, At: nanos(s.clock()), Peer: e.Peer.String(),
		Action: e.Action, From: e.From, To: e.To, Origin: e.Origin,
	}
	return setJSON(txn, auditKey(seq), r, fmt.Sprintf("audit entry %d", seq))
}

// AuditLog returns the newest limit entries (all of them if limit <= 0),
// ordered oldest to newest.
func (s *Store) AuditLog(limit int) ([]AuditEntry, error) {
	var out []AuditEntry
	err := s.view(func(txn *wtxn) error {
		return scanPrefix(txn, []byte(prefixAudit), nil, true, func(item *badger.Item) error {
			if limit > 0 && len(out) == limit {
				return errStop
			}
			var r auditRecord
			if err := item.Value(func(b []byte) error { return decodeJSON(b, &r, "audit entry") }); err != nil {
				return err
			}
			id, err := peer.Decode(r.Peer)
			if err != nil {
				return fmt.Errorf("%w: audit entry %d peer %q: %v", ErrCorrupt, r.Seq, r.Peer, err)
			}
			out = append(out, AuditEntry{
				Seq: r.Seq, At: fromNanos(r.At), Peer: id,
				Action: r.Action, From: r.From, To: r.To, Origin: r.Origin,
			})
			return nil
		})
	})
	slices.Reverse(out)
	return out, err
}
