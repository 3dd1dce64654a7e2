package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/kithmesh/kith/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The store is the node's replay cache: a message ID accepted before a
// restart is still refused after it (but for the last replayFlushInterval
// before a crash; see there).
var _ crypto.ReplayCache = (*Store)(nil)

// pruneBatch bounds the deletes of one PruneReplay transaction, well under
// badger's transaction size limit.
const pruneBatch = 1000

// Replay entries are checked in memory and written to badger in batches,
// at most replayFlushInterval apart (and on Close): an fsync per inbound
// stream would be the most expensive step of serving a delegation. A crash
// can lose the entries of the last interval, and that is safe: an envelope
// is accepted only from the libp2p-authenticated peer that signed it, so
// only that peer could replay it, and every message is idempotent for its
// sender (a repeated offer is answered as a reattach, a repeated cancel or
// query changes nothing).
const (
	replayFlushInterval = time.Second
	replayFlushBatch    = 1024
	replayMemPrune      = 10 * time.Second
)

type replayMem struct {
	mu        sync.Mutex
	seen      map[string]time.Time // every live entry, stored or pending
	pending   map[string]time.Time // not yet written
	lastFlush time.Time
	lastPrune time.Time
	max       int       // live entries at most (Options.MaxReplayEntries)
	fullPrune time.Time // when a full cache last looked for expired entries
}

// fullPruneInterval spaces the scans a full cache makes for expired
// entries, so a flood against a full cache costs a map lookup per stream,
// not a scan of the whole map.
const fullPruneInterval = time.Second

// loadReplay reads the stored, unexpired entries into memory at open.
func (s *Store) loadReplay() error {
	s.replay.seen = make(map[string]time.Time)
	s.replay.pending = make(map[string]time.Time)
	now := s.clock()
	s.replay.lastFlush, s.replay.lastPrune = now, now
	return s.view(func(txn *wtxn) error {
		return scanPrefix(txn, []byte(prefixReplay), nil, false, func(item *badger.Item) error {
			exp, err := replayExpiry(item)
			if err != nil {
				return err
			}
			if exp.After(now) {
				s.replay.seen[string(item.KeyCopy(nil))] = exp
			}
			return nil
		})
	})
}

// CheckAndRemember records (sender, id) until expires and reports whether
// it was already recorded and not yet expired. It is atomic: of concurrent
// calls with the same pair, exactly one reports false. An expires at or
// before now is refused (ErrInvalid): the envelope layer rejects expired
// envelopes before asking, and remembering one for no time would make a
// replay of it look new. Entries reach the disk in batches (see
// replayFlushInterval for why that is safe).
//
// Each stored entry also carries a badger TTL (rounded up, plus a second),
// so badger stops returning it and compaction drops it even if PruneReplay
// never runs; the expiry stored in the value decides, to the nanosecond.
//
// The cache holds at most Options.MaxReplayEntries live entries. A new pair
// arriving when it is full is refused with crypto.ErrReplayCacheFull and
// not recorded: evicting a live entry would let its message be replayed,
// while refusing costs only availability, and only until entries expire
// (the envelope layer caps an entry's life at minutes). Already recorded
// pairs are still reported seen.
func (s *Store) CheckAndRemember(sender peer.ID, id crypto.MessageID, expires time.Time) (seen bool, err error) {
	if err := validPeerID(sender); err != nil {
		return false, err
	}
	now := s.clock()
	if !expires.After(now) {
		return false, fmt.Errorf("%w: message %s from %s expired at %s, before now (%s)",
			ErrInvalid, id, sender, expires.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return false, ErrClosed
	}
	key := string(replayKey(sender, id))
	r := &s.replay
	r.mu.Lock()
	defer r.mu.Unlock()
	if exp, ok := r.seen[key]; ok && exp.After(now) {
		return true, nil
	}
	if len(r.seen) >= r.max && now.Sub(r.fullPrune) >= fullPruneInterval {
		r.fullPrune = now
		r.pruneMemLocked(now)
	}
	if len(r.seen) >= r.max {
		return false, fmt.Errorf("%w: %d live entries; message %s from %s refused", crypto.ErrReplayCacheFull, len(r.seen), id, sender)
	}
	r.seen[key] = expires
	r.pending[key] = expires
	if len(r.pending) >= replayFlushBatch || now.Sub(r.lastFlush) >= replayFlushInterval {
		if err := s.flushReplayLocked(now); err != nil {
			return false, err
		}
	}
	return false, nil
}

// flushReplay writes the pending entries now.
func (s *Store) flushReplay() error {
	s.replay.mu.Lock()
	defer s.replay.mu.Unlock()
	return s.flushReplayLocked(s.clock())
}

func (s *Store) flushReplayLocked(now time.Time) error {
	r := &s.replay
	r.lastFlush = now
	if now.Sub(r.lastPrune) >= replayMemPrune {
		r.lastPrune = now
		r.pruneMemLocked(now)
	}
	if len(r.pending) == 0 {
		return nil
	}
	err := s.update(nil, func(txn *wtxn) error {
		for key, expires := range r.pending {
			if !expires.After(now) {
				continue
			}
			e := badger.NewEntry([]byte(key), be64(uint64(expires.UnixNano())))
			// Badger compares TTLs with the wall clock, the store with
			// s.now: carry the remaining lifetime over, so an injected
			// clock cannot make badger drop an entry early.
			e.ExpiresAt = uint64(time.Now().Add(expires.Sub(now)).Unix()) + 2
			if err := txn.SetEntry(e); err != nil {
				return fmt.Errorf("store: remember replay entries: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	clear(r.pending)
	return nil
}

// pruneMemLocked drops the entries that expired at or before now from
// memory (an expired pending entry is never written: flush skips it).
func (r *replayMem) pruneMemLocked(now time.Time) {
	for k, exp := range r.seen {
		if !exp.After(now) {
			delete(r.seen, k)
			delete(r.pending, k)
		}
	}
}

func getReplay(txn *wtxn, key []byte) (expires time.Time, found bool, err error) {
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
	s.replay.mu.Lock()
	s.replay.pruneMemLocked(now)
	err = s.flushReplayLocked(s.clock())
	s.replay.mu.Unlock()
	if err != nil {
		return 0, err
	}
	for {
		var expired [][]byte
		err := s.view(func(txn *wtxn) error {
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
		err = s.update(nil, func(txn *wtxn) error {
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
