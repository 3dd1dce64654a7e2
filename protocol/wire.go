package protocol

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

// Helpers shared by the toWire/fromWire conversions. Conventions:
//   - fromWire functions take a pb value (nil means absent), return the
//     domain value and run the same check() the encoder runs, so a decoded
//     value always re-encodes.
//   - Empty bytes and lists decode to nil, so decode → encode → decode
//     gives values that compare equal with reflect.DeepEqual.
//   - Times are whole milliseconds since the Unix epoch, 0 meaning "none";
//     decoded times are in UTC.

// Deterministic output so that the same value always gives the same bytes
// (golden vectors, hashes in result proofs). Unknown fields are kept on
// decode by the pb layer but dropped by the domain conversion: a newer
// minor version may add fields that this version ignores.
var marshalOpts = proto.MarshalOptions{Deterministic: true}

func marshal(m proto.Message) ([]byte, error) {
	b, err := marshalOpts.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("protocol: marshal: %w", err)
	}
	return b, nil
}

func unmarshal(name string, b []byte, m proto.Message) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return invalid(name, "%v", err)
	}
	return nil
}

func bytesOrNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func timeToWire(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func timeFromWire(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// durationToWire encodes d as whole milliseconds in a uint32 (up to ~49
// days); sub-millisecond precision is dropped.
func durationToWire(name string, d time.Duration) (uint32, error) {
	ms := d.Milliseconds()
	if d < 0 || ms > math.MaxUint32 {
		return 0, invalid(name, "%v outside 0..%d ms", d, uint32(math.MaxUint32))
	}
	return uint32(ms), nil
}

func durationFromWire(ms uint32) time.Duration { return time.Duration(ms) * time.Millisecond }

// checkPeer validates a peer ID the way the decoder would see it, so that
// the encoder never emits one a peer will refuse.
func checkPeer(name string, id peer.ID) error {
	_, err := peerFromWire(name, []byte(id))
	return err
}

func peerFromWire(name string, b []byte) (peer.ID, error) {
	if len(b) == 0 {
		return "", invalid(name, "missing peer ID")
	}
	if len(b) > MaxPeerIDLen {
		return "", invalid(name, "peer ID of %d bytes, limit %d", len(b), MaxPeerIDLen)
	}
	id, err := peer.IDFromBytes(b)
	if err != nil {
		return "", invalid(name, "%v", err)
	}
	return id, nil
}

// delegationIDFromWire requires exactly 16 bytes, not all zero.
func delegationIDFromWire(name string, b []byte) (DelegationID, error) {
	id, err := DelegationIDFromBytes(b)
	if err != nil {
		return DelegationID{}, within(name, err)
	}
	if id.IsZero() {
		return DelegationID{}, within(name, fmt.Errorf("%w: all zero", ErrBadID))
	}
	return id, nil
}

func checkDelegationID(name string, id DelegationID) error {
	if id.IsZero() {
		return within(name, fmt.Errorf("%w: all zero", ErrBadID))
	}
	return nil
}

func stateToWire(s State) pb.State { return pb.State(s) }

func stateFromWire(name string, s pb.State) (State, error) {
	if s < 0 || int(s) >= len(stateNames) {
		return 0, within(name, fmt.Errorf("%w: state %d", ErrUnknownEnum, int32(s)))
	}
	return State(s), nil
}

func checkState(name string, s State) error {
	if int(s) >= len(stateNames) {
		return within(name, fmt.Errorf("%w: state %d", ErrUnknownEnum, uint8(s)))
	}
	return nil
}

func trustFromWire(name string, t pb.TrustLevel) (TrustLevel, error) {
	if t < 0 || int(t) >= len(trustNames) {
		return 0, within(name, fmt.Errorf("%w: trust level %d", ErrUnknownEnum, int32(t)))
	}
	return TrustLevel(t), nil
}

func checkTrust(name string, t TrustLevel) error {
	if int(t) >= len(trustNames) {
		return within(name, fmt.Errorf("%w: trust level %d", ErrUnknownEnum, uint8(t)))
	}
	return nil
}

func reasonFromWire(name string, r pb.RejectReason) (RejectReason, error) {
	if r < 0 || int(r) >= len(reasonNames) {
		return 0, within(name, fmt.Errorf("%w: reject reason %d", ErrUnknownEnum, int32(r)))
	}
	return RejectReason(r), nil
}

func checkReason(name string, r RejectReason) error {
	if int(r) >= len(reasonNames) {
		return within(name, fmt.Errorf("%w: reject reason %d", ErrUnknownEnum, uint8(r)))
	}
	return nil
}

func versionsToWire(vs []Version) []string {
	if len(vs) == 0 {
		return nil
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

func versionsFromWire(name string, ss []string) ([]Version, error) {
	if err := checkCount(name, len(ss), MaxVersions); err != nil {
		return nil, err
	}
	if len(ss) == 0 {
		return nil, nil
	}
	out := make([]Version, len(ss))
	for i, s := range ss {
		v, err := ParseVersion(s)
		if err != nil {
			return nil, within(indexed(name, i), err)
		}
		out[i] = v
	}
	return out, nil
}

// errNoSignature marks a signed assertion whose signature is missing or of
// the wrong size; crypto would refuse it anyway, but a decoder should not
// hand on a value that can never verify.
var errNoSignature = errors.New("signature is not 64 bytes")

func assertionToWire(a crypto.Assertion) *pb.SignedAssertion {
	if len(a.Payload) == 0 && len(a.Signature) == 0 {
		return nil
	}
	return &pb.SignedAssertion{Payload: a.Payload, Signature: a.Signature}
}

func assertionFromWire(p *pb.SignedAssertion) crypto.Assertion {
	return crypto.Assertion{Payload: bytesOrNil(p.GetPayload()), Signature: bytesOrNil(p.GetSignature())}
}

// checkAssertion requires a complete assertion: a payload and a signature
// of Ed25519 size.
func checkAssertion(name string, a crypto.Assertion) error {
	if len(a.Payload) == 0 {
		return invalid(name, "missing payload")
	}
	if len(a.Signature) != ed25519.SignatureSize {
		return within(name, fmt.Errorf("%w (%d bytes)", errNoSignature, len(a.Signature)))
	}
	return nil
}
