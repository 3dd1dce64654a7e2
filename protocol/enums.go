package protocol

import (
	"errors"
	"fmt"
)

// ErrUnknownEnum reports a trust level, state or reason whose text or wire
// value this version does not know.
var ErrUnknownEnum = errors.New("protocol: unknown enum value")

// TrustLevel is how far a node trusts a peer. The zero value is Untrusted.
type TrustLevel uint8

const (
	Untrusted TrustLevel = iota
	Verified
	Trusted
)

var trustNames = [...]string{"untrusted", "verified", "trusted"}

func (t TrustLevel) String() string {
	if int(t) < len(trustNames) {
		return trustNames[t]
	}
	return fmt.Sprintf("trust(%d)", uint8(t))
}

// MarshalText implements encoding.TextMarshaler.
func (t TrustLevel) MarshalText() ([]byte, error) {
	if int(t) >= len(trustNames) {
		return nil, fmt.Errorf("%w: trust level %d", ErrUnknownEnum, uint8(t))
	}
	return []byte(trustNames[t]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *TrustLevel) UnmarshalText(b []byte) error {
	for i, n := range trustNames {
		if n == string(b) {
			*t = TrustLevel(i)
			return nil
		}
	}
	return fmt.Errorf("%w: trust level %q (want untrusted, verified or trusted)", ErrUnknownEnum, b)
}

// ParseTrustLevel parses "untrusted", "verified" or "trusted".
func ParseTrustLevel(s string) (TrustLevel, error) {
	var t TrustLevel
	err := t.UnmarshalText([]byte(s))
	return t, err
}

// State is the state of a delegation. Offered, Accepted, Running and
// InputRequired are live; the rest are terminal and the first one wins.
type State uint8

const (
	StateUnknown State = iota
	StateOffered
	StateAccepted
	StateRunning
	StateInputRequired
	StateCompleted
	StateFailed
	StateCancelled
	StateExpired
	StateRejected
	StatePreempted
)

var stateNames = [...]string{
	"unknown", "offered", "accepted", "running", "input_required",
	"completed", "failed", "cancelled", "expired", "rejected", "preempted",
}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Terminal reports whether no further transition may follow s.
func (s State) Terminal() bool { return s >= StateCompleted && int(s) < len(stateNames) }

// MarshalText implements encoding.TextMarshaler.
func (s State) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("%w: state %d", ErrUnknownEnum, uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if n == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("%w: state %q", ErrUnknownEnum, b)
}

// RejectReason is the typed reason of a delegation_reject.
type RejectReason uint8

const (
	ReasonUnspecified RejectReason = iota
	ReasonBusy
	ReasonNoMatchingProfile
	ReasonBudgetTooLow
	ReasonBudgetTooHigh
	ReasonNotAllowed
	ReasonRateLimited
	ReasonLoopDetected
	ReasonInsufficientVRAM
	ReasonVersionUnsupported
	ReasonExpired
	// ReasonPayloadTooLarge (1.1): the task is larger than the provider's
	// max_payload_bytes.
	ReasonPayloadTooLarge
	// 1.3, the answers to a continuation that cannot continue: the
	// delegation is not waiting for input, the turn does not follow the
	// last one, or the peer has no delegation of that ID here (also when
	// another peer has: IDs cannot be probed).
	ReasonNotWaiting
	ReasonTurnOutOfOrder
	ReasonUnknownDelegation
)

var reasonNames = [...]string{
	"unspecified", "busy", "no_matching_profile", "budget_too_low", "budget_too_high",
	"not_allowed", "rate_limited", "loop_detected", "insufficient_vram",
	"version_unsupported", "expired", "payload_too_large",
	"not_waiting", "turn_out_of_order", "unknown_delegation",
}

func (r RejectReason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// MarshalText implements encoding.TextMarshaler.
func (r RejectReason) MarshalText() ([]byte, error) {
	if int(r) >= len(reasonNames) {
		return nil, fmt.Errorf("%w: reject reason %d", ErrUnknownEnum, uint8(r))
	}
	return []byte(reasonNames[r]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *RejectReason) UnmarshalText(b []byte) error {
	for i, n := range reasonNames {
		if n == string(b) {
			*r = RejectReason(i)
			return nil
		}
	}
	return fmt.Errorf("%w: reject reason %q", ErrUnknownEnum, b)
}

// MessageType is one of the eight message types of /kith/delegate/1.0.0. Its
// numeric value is what the envelope header's type field carries.
type MessageType uint8

const (
	TypeUnknown MessageType = iota
	TypeCapabilityQuery
	TypeCapabilityResponse
	TypeDelegationOffer
	TypeDelegationAccept
	TypeDelegationReject
	TypeDelegationStatus
	TypeDelegationResult
	TypeDelegationCancel
)

var typeNames = [...]string{
	"unknown", "capability_query", "capability_response", "delegation_offer",
	"delegation_accept", "delegation_reject", "delegation_status",
	"delegation_result", "delegation_cancel",
}

func (m MessageType) String() string {
	if int(m) < len(typeNames) {
		return typeNames[m]
	}
	return fmt.Sprintf("type(%d)", uint8(m))
}

// Valid reports whether m is one of the eight known message types.
func (m MessageType) Valid() bool { return m > TypeUnknown && int(m) < len(typeNames) }

// MarshalText implements encoding.TextMarshaler.
func (m MessageType) MarshalText() ([]byte, error) {
	if !m.Valid() {
		return nil, fmt.Errorf("%w: message type %d", ErrUnknownEnum, uint8(m))
	}
	return []byte(typeNames[m]), nil
}
