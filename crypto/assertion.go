package crypto

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
)

// ErrBadSignature reports a signature that does not verify.
var ErrBadSignature = errors.New("crypto: bad signature")

// Signature domains. Each kind of signed object has its own, so a signature
// made for one can never be replayed as another.
const (
	DomainEnvelopeHeader      = "kith/envelope-header/v1"
	DomainCapabilityAssertion = "kith/capability-assertion/v1"
	DomainResultProof         = "kith/result-proof/v1"
)

// Assertion is a payload and the signature over exactly those bytes.
// Verifiers check the bytes they received; they never re-encode first.
type Assertion struct {
	Payload   []byte
	Signature []byte
}

// signingInput is domain || 0x00 || payload.
func signingInput(domain string, payload []byte) []byte {
	b := make([]byte, 0, len(domain)+1+len(payload))
	b = append(b, domain...)
	b = append(b, 0)
	return append(b, payload...)
}

// SignAssertion signs payload under domain.
func (i *Identity) SignAssertion(domain string, payload []byte) Assertion {
	return Assertion{Payload: payload, Signature: i.sign(signingInput(domain, payload))}
}

// VerifyAssertion checks that signer signed a.Payload under domain.
func VerifyAssertion(signer peer.ID, domain string, a Assertion) error {
	keys, err := cachedKeys(signer)
	if err != nil {
		return err
	}
	return verifyWith(keys.v, domain, a.Payload, a.Signature)
}

func verifyWith(v verifier, domain string, payload, sig []byte) error {
	if len(sig) != ed25519.SignatureSize || !v.verify(signingInput(domain, payload), sig) {
		return fmt.Errorf("%w (%s)", ErrBadSignature, domain)
	}
	return nil
}
