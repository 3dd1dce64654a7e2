package protocol

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrBadID reports a delegation or context identifier that is not 16 bytes
// (32 hex characters).
var ErrBadID = errors.New("protocol: malformed identifier")

// DelegationID names one delegation on both sides of the wire. It is 16
// random bytes chosen by the requester; its text form is lower-case hex.
type DelegationID [16]byte

// NewDelegationID returns a fresh random DelegationID.
func NewDelegationID() DelegationID {
	var id DelegationID
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24+).
	return id
}

// IsZero reports whether id is the zero value (never a valid delegation).
func (id DelegationID) IsZero() bool { return id == DelegationID{} }

func (id DelegationID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText implements encoding.TextMarshaler.
func (id DelegationID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *DelegationID) UnmarshalText(b []byte) error {
	v, err := parseID16(b)
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// ParseDelegationID parses the hex text form of a DelegationID.
func ParseDelegationID(s string) (DelegationID, error) {
	var id DelegationID
	err := id.UnmarshalText([]byte(s))
	return id, err
}

// DelegationIDFromBytes converts wire bytes into a DelegationID.
func DelegationIDFromBytes(b []byte) (DelegationID, error) {
	if len(b) != 16 {
		return DelegationID{}, fmt.Errorf("%w: delegation id has %d bytes, want 16", ErrBadID, len(b))
	}
	return DelegationID(b), nil
}

// ContextID groups the delegations of one conversation (A2A context_id). It
// is free text chosen by the client, capped at MaxContextIDLen bytes.
type ContextID string

// MaxContextIDLen caps the length of a ContextID on the wire.
const MaxContextIDLen = 128

func parseID16(b []byte) ([16]byte, error) {
	var out [16]byte
	if len(b) != 32 {
		return out, fmt.Errorf("%w: %q is not 32 hex characters", ErrBadID, b)
	}
	if _, err := hex.Decode(out[:], b); err != nil {
		return out, fmt.Errorf("%w: %v", ErrBadID, err)
	}
	return out, nil
}
