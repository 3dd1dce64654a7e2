package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/kithmesh/kith/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The store is the node's durable replay cache: a message ID accepted before
// a restart is still refused after it.
var _ crypto.ReplayCache = (*Store)(nil)

// pruneBatch bounds the deletes of one PruneReplay transaction, well under
// badger's transaction size limit.
const pruneBatch = 1000

// CheckAndRemember records (sender, id) until expires and reports whether
// it was already recorded and not yet expired. It is atomic: of concurrent
// calls with the same pair, exactly one reports false. An expires at or
// before now is refused (ErrInvalid): the envelope layer rejects expired
// envelopes before asking, and remembering one for no time would make a
// replay of it look new.
//
// Each entry also carries a badger TTL (rounded up, plus a second), so
// badger stops returning it and compaction drops it even if PruneReplay
// never runs; the expiry stored in the value decides, to the nanosecond.
func (s *Store) CheckAndRemember(sender peer.ID, id crypto.MessageID, expires time.Time) (seen bool, err error) {
	if err := validPeerID(sender); err != nil {
		return false, err
	}
	now := s.clock()
	if !expires.After(now) {
		return false, fmt.Errorf("%w: message %s from %s expired at %s, before now (%s)",
			ErrInvalid, id, sender, expires.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	key := replayKey(sender, id)
	// Badger compares TTLs with the wall clock, the store with s.now: carry
	// the remaining lifetime over, so an injected clock cannot make badger
	// drop an entry early.
	ttlAt := uint64(time.Now().Add(expires.Sub(now)).Unix()) + 2
	err = s.update([]string{string(key)}, func(txn *badger.Txn) error {
		seen = false
		exp, found, err := getReplay(txn, key)
		if err != nil {
			return err
		}
		if found && exp.After(now) {
			seen = true
			return nil
		}
		e := badger.NewEntry(key, be64(uint64(expires.UnixNano())))
		e.ExpiresAt = ttlAt
		if err := txn.SetEntry(e); err != nil {
			return fmt.Errorf("store: remember message %s from %s: %w", id, sender, err)
		}
		return nil
	})
	return seen, err
}

func getReplay(txn *badger.Txn, key []byte) (expires time.Time, found bool, err error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("store: read replay entry: %w", err)
	}
	expires, err = replayExpiry(item)
	return expires, err == nil, err
}

func replayExpiry(item *badger.Item) (time.Time, error) {
	var t time.Time
	err := item.Value(func(b []byte) error {
		if len(b) != 8 {
			return fmt.Errorf("%w: replay entry %q holds %d bytes, want 8", ErrCorrupt, item.Key(), len(b))
		}
		t = time.Unix(0, int64(binary.BigEndian.Uint64(b)))
		return nil
	})
	return t, err
}

// PruneReplay deletes the replay entries that expired at or before now and
// returns how many it deleted. Entries whose badger TTL has already passed
// are invisible and not counted; compaction removes them.
func (s *Store) PruneReplay(now time.Time) (removed int, err error) {
	for {
		var expired [][]byte
		err := s.view(func(txn *badger.Txn) error {
			return scanPrefix(txn, []byte(prefixReplay), nil, false, func(item *badger.Item) error {
				exp, err := replayExpiry(item)
				if err != nil {
					return err
				}
				if !exp.After(now) {
					expired = append(expired, item.KeyCopy(nil))
				}
				if len(expired) == pruneBatch {
					return errStop
				}
				return nil
			})
		})
		if err != nil || len(expired) == 0 {
			return removed, err
		}
		var n int
		// No key locks: a batch would need a thousand. A CheckAndRemember
		// that renews one of these keys meanwhile makes this transaction
		// conflict, and the retry reads the renewed expiry and keeps it.
		err = s.update(nil, func(txn *badger.Txn) error {
			n = 0
			for _, key := range expired {
				exp, found, err := getReplay(txn, key)
				if err != nil {
					return err
				}
				if !found || exp.After(now) {
					continue
				}
				if err := txn.Delete(key); err != nil {
					return fmt.Errorf("store: prune replay entry: %w", err)
				}
				n++
			}
			return nil
		})
		removed += n
		if err != nil || len(expired) < pruneBatch {
			return removed, err
		}
	}
}
