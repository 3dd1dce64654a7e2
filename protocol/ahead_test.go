package protocol

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/crypto"
)

// A result encoded ahead of its proof, once the signed proof is set, is
// byte for byte the signed result's EncodeMessage; and the bytes before
// ProofAt never change on the way.
func TestResultAheadMatches(t *testing.T) {
	p := peers(t)
	large := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	cases := []struct {
		name string
		r    DelegationResult
		turn uint32
	}{
		{"small", DelegationResult{State: StateCompleted, Output: []Part{TextPart("the answer")}}, 0},
		{"large with a reason", DelegationResult{State: StateFailed, Output: []Part{TextPart(large)}, Reason: "stopped at token budget",
			Usage: Usage{Prompt: 1 << 20, Completion: 300, Total: 1<<20 + 300}, Duration: 1500 * time.Millisecond}, 3},
		{"parts of every kind", DelegationResult{State: StateCompleted, Output: []Part{TextPart(large[:300<<10]), DataPart([]byte(`{"n":"` + large[:70000] + `"}`)),
			FilePart(File{Name: "a.txt", MediaType: "text/plain", Bytes: []byte("x")})}}, 0},
		{"no output", DelegationResult{State: StateCancelled, Reason: "cancelled by requester"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.r
			r.ID = fixtureDelegation
			proof := fixtureResultProof(t)
			proof.OfferHash, proof.OutputHash = [32]byte{}, [32]byte{}
			proof.Usage, proof.State, proof.Turns = r.Usage, r.State, c.turn
			a := encodeAheadOf(t, &r, proof)
			before := bytes.Clone(a.Bytes()[:a.ProofAt()])
			proof.OfferHash = sha256.Sum256([]byte("offer"))
			proof.OutputHash = OutputDigest(proof.Digest, r.Output)
			signed, err := SignResultProof(p.provider, proof)
			if err != nil {
				t.Fatal(err)
			}
			if !a.SetProof(signed) {
				t.Fatal("SetProof refused a proof of the planned size")
			}
			r.Proof = signed
			want, err := EncodeMessage(&r)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Bytes(), want) {
				t.Fatalf("encoded ahead: %d bytes, EncodeMessage: %d bytes, and they differ", len(a.Bytes()), len(want))
			}
			if !bytes.Equal(a.Bytes()[:a.ProofAt()], before) {
				t.Fatal("bytes before ProofAt changed when the proof was set")
			}
			m, err := DecodeMessage(a.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if got := m.(*DelegationResult); got.Reason != r.Reason || !bytes.Equal(got.Proof.Signature, signed.Signature) {
				t.Fatalf("decoded %+v", got)
			}
		})
	}
}

// A proof that does not fit the room set aside is refused, and the
// encoding is left as it was.
func TestResultAheadRefusesOtherSizes(t *testing.T) {
	p := peers(t)
	r := DelegationResult{ID: fixtureDelegation, State: StateCompleted, Output: []Part{TextPart("out")}, Reason: "done"}
	proof := fixtureResultProof(t)
	a := encodeAheadOf(t, &r, proof)
	was := bytes.Clone(a.Bytes())
	proof.OutputHash = [32]byte{} // left out of the encoding: 34 bytes short
	short, err := SignResultProof(p.provider, proof)
	if err != nil {
		t.Fatal(err)
	}
	if a.SetProof(short) {
		t.Fatal("SetProof took a proof shorter than planned")
	}
	if a.SetProof(crypto.Assertion{Payload: short.Payload}) {
		t.Fatal("SetProof took an unsigned proof")
	}
	if !bytes.Equal(a.Bytes(), was) {
		t.Fatal("a refused proof changed the encoding")
	}
	if _, err := EncodeResultAhead(&r, 0); err == nil {
		t.Fatal("room for an empty proof")
	}
}

// encodeAheadOf encodes r with room for proof once signed, as a provider
// does before it hashes (ResultProofLen, EncodeResultAhead).
func encodeAheadOf(t *testing.T, r *DelegationResult, proof ResultProof) *ResultAhead {
	t.Helper()
	n, err := ResultProofLen(proof)
	if err != nil {
		t.Fatal(err)
	}
	a, err := EncodeResultAhead(r, n)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
