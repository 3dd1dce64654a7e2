package crypto

import (
	"encoding/hex"
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

// ReplayCache remembers which (sender, message ID) pairs have been accepted.
// The store implements it durably; MemoryReplayCache is for tests.
type ReplayCache interface {
	// CheckAndRemember records (sender, id) until expires and reports
	// whether it had already been recorded. It must be atomic: of two
	// concurrent calls with the same pair, exactly one reports false.
	CheckAndRemember(sender peer.ID, id MessageID, expires time.Time) (seen bool, err error)
}
