package crypto

import (
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// MessageID names one envelope (one stream). It is 16 random bytes chosen by
// the sender and never reused: receivers remember the IDs they have seen
// until the envelope expires.
type MessageID [16]byte

func (m MessageID) String() string { return hex.EncodeToString(m[:]) }

// MarshalText implements encoding.TextMarshaler.
func (m MessageID) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *MessageID) UnmarshalText(b []byte) error {
	if len(b) != 32 {
		return fmt.Errorf("crypto: message id %q is not 32 hex characters", b)
	}
	_, err := hex.Decode(m[:], b)
	return err
}

// ErrReplayCacheFull: the replay cache already holds as many live entries
// as it may, so a new message ID cannot be remembered and its stream is
// refused. A full cache never evicts a live entry, because the evicted
// message could then be replayed; it refuses until entries expire, which
// the envelope lifetime cap (MaxEnvelopeTTL) keeps to minutes.
var ErrReplayCacheFull = errors.New("crypto: replay cache full")

// DefaultMaxReplayEntries is how many live entries a replay cache holds
// unless told otherwise. One peer, held to its stream rate (by default 30
// streams a second), fills about 11,000 within an entry's lifetime of at
// most MaxEnvelopeTTL plus three skews; this leaves room for a dozen such
// peers at once, at roughly 150 bytes of memory (and 70 of disk) an entry.
const DefaultMaxReplayEntries = 1 << 17

// ReplayCache remembers which (sender, message ID) pairs have been accepted.
// The store implements it durably; MemoryReplayCache is for tests.
type ReplayCache interface {
	// CheckAndRemember records (sender, id) until expires and reports
	// whether it had already been recorded. It must be atomic: of two
	// concurrent calls with the same pair, exactly one reports false. When
	// the pair is new and the cache is full it records nothing and returns
	// an error wrapping ErrReplayCacheFull.
	CheckAndRemember(sender peer.ID, id MessageID, expires time.Time) (seen bool, err error)
}
