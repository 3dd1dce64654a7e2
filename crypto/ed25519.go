package crypto

import (
	"crypto/ed25519"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// Ed25519 signatures are made and checked with curve25519-voi rather than
// crypto/ed25519: the same signatures (RFC 8032 signing is deterministic)
// and, under its StdLib rules, the same verdicts, in about half the time
// (BenchmarkEd25519 sets the two side by side). Every delegation's result
// proof is signed by its provider and checked by its requester on the
// delegation's critical path, as is every envelope header that sets up a
// session. FuzzEd25519 holds both functions to the standard library's.

// stdlibRules are crypto/ed25519's verification rules: cofactorless, S
// canonical, A and R of small order or encoded non-canonically accepted.
var stdlibRules = &voi.Options{Verify: voi.VerifyOptionsStdLib}

// edSign is ed25519.Sign.
func edSign(priv ed25519.PrivateKey, msg []byte) []byte {
	return voi.Sign(voi.PrivateKey(priv), msg)
}

// edVerify is ed25519.Verify: it reports whether sig is pub's signature of
// msg, and panics, as that does, when pub is not 32 bytes long.
func edVerify(pub ed25519.PublicKey, msg, sig []byte) bool {
	if len(pub) != ed25519.PublicKeySize {
		panic("crypto: bad ed25519 public key length")
	}
	return voi.VerifyWithOptions(voi.PublicKey(pub), msg, sig, stdlibRules)
}

// verifier checks the signatures of one public key. It expands the key
// once (about 6 µs and 1.5 KiB here), which saves that much of each later
// verification: the key cache keeps one per peer (keycache.go).
type verifier struct {
	pub ed25519.PublicKey
	x   *voi.ExpandedPublicKey // nil: the key does not expand; verify as edVerify
}

func newVerifier(pub ed25519.PublicKey) verifier {
	x, err := voi.NewExpandedPublicKey(voi.PublicKey(pub))
	if err != nil {
		x = nil
	}
	return verifier{pub: pub, x: x}
}

// verify is edVerify(v.pub, msg, sig).
func (v verifier) verify(msg, sig []byte) bool {
	if v.x == nil {
		return edVerify(v.pub, msg, sig)
	}
	return voi.VerifyExpandedWithOptions(v.x, msg, sig, stdlibRules)
}
