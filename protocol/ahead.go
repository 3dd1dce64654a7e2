package protocol

import (
	"crypto/ed25519"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kithmesh/kith/crypto"
)

// A result encoded before its proof is signed. A provider's proof signs
// the digests of the output and of the offer, which takes a millisecond
// or more per MiB; a large result's file can be written meanwhile, if its
// bytes are known. They are, but for the proof's: the proof has a fixed
// size once its fields but the digests are known (each digest is 32
// bytes, the signature 64), and it lies after the output in the
// encoding. So the result is encoded with room of that size for the
// proof, the room is filled once the proof is signed, and the bytes are
// those EncodeMessage gives the signed result (TestResultAheadMatches).

// resultProofField and resultReasonField: the field numbers of
// DelegationResult.proof and .reason (kith.proto), its last two fields,
// in that order.
const (
	resultProofField  = 6
	resultReasonField = 7
)

// ResultAhead is a DelegationResult's encoding in which every byte is
// final but the proof's.
type ResultAhead struct {
	b     []byte
	at, n int // the proof's field: b[at : at+n]
}

// ResultProofLen is the length of p's encoding (EncodeResultProof) once
// its offer and output digests are set, whatever their value: each is 32
// bytes. (A digest of all zeros is left out of the encoding, and a proof
// with one is shorter; no hash gives one in practice, and SetProof
// refuses a proof of another length.) p is the proof as it will be
// signed, its provider and digest set.
func ResultProofLen(p ResultProof) (int, error) {
	for i := range p.OfferHash {
		p.OfferHash[i], p.OutputHash[i] = 0xff, 0xff
	}
	b, err := EncodeResultProof(p)
	return len(b), err
}

// EncodeResultAhead encodes r as EncodeMessage will once r.Proof holds an
// assertion of a payloadLen-byte payload (ResultProofLen) and an Ed25519
// signature; r.Proof itself is not read. Every byte of the encoding but
// the proof's is final: those before ProofAt, and the reason after it.
func EncodeResultAhead(r *DelegationResult, payloadLen int) (*ResultAhead, error) {
	if payloadLen <= 0 {
		return nil, invalid("proof", "a payload of %d bytes", payloadLen)
	}
	c := *r
	c.Proof = crypto.Assertion{Payload: make([]byte, payloadLen), Signature: make([]byte, ed25519.SignatureSize)}
	b, err := EncodeMessage(&c)
	if err != nil {
		return nil, err
	}
	n := len(appendProofField(nil, c.Proof))
	at := len(b) - n
	if r.Reason != "" {
		at -= protowire.SizeTag(resultReasonField) + protowire.SizeBytes(len(r.Reason))
	}
	// The room must be where the layout puts it: should an encoder order
	// the fields otherwise, the result is encoded after signing instead.
	if at <= 0 {
		return nil, fmt.Errorf("protocol: no room for the proof in a %d-byte result", len(b))
	}
	num, typ, k := protowire.ConsumeTag(b[at:])
	if k < 0 || num != resultProofField || typ != protowire.BytesType || k+protowire.ConsumeFieldValue(num, typ, b[at+k:]) != n {
		return nil, fmt.Errorf("protocol: the proof is not where a result's encoding puts it")
	}
	return &ResultAhead{b: b, at: at, n: n}, nil
}

// Bytes is the whole encoding. The proof's bytes are final once SetProof
// has taken it; the caller must not change any byte.
func (e *ResultAhead) Bytes() []byte { return e.b }

// ProofAt is where the proof's bytes start: every byte before it is final.
func (e *ResultAhead) ProofAt() int { return e.at }

// SetProof writes a into the room set aside for it, and reports whether it
// did. It does not, and changes nothing, when a is not a complete
// assertion or takes other room than planned (another payload length):
// encode the result again then, with EncodeMessage.
func (e *ResultAhead) SetProof(a crypto.Assertion) bool {
	if checkAssertion("proof", a) != nil {
		return false
	}
	f := appendProofField(nil, a)
	if len(f) != e.n {
		return false
	}
	copy(e.b[e.at:], f)
	return true
}

// appendProofField appends DelegationResult.proof holding a, encoded as
// the deterministic marshal encodes it: a SignedAssertion's payload, then
// its signature.
func appendProofField(b []byte, a crypto.Assertion) []byte {
	inner := protowire.SizeTag(1) + protowire.SizeBytes(len(a.Payload)) + protowire.SizeTag(2) + protowire.SizeBytes(len(a.Signature))
	b = protowire.AppendTag(b, resultProofField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, a.Payload)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, a.Signature)
}
