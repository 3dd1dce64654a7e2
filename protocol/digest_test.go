package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	lblake3 "lukechampine.com/blake3"
)

// Proof digests (1.6): the hashes and their wire form. The scan that
// reads an offer's proof_digest: offerscan_test.go.

func fixtureDigests(tb testing.TB) []struct {
	name string
	m    Message
} {
	offer := fixtureMessages(tb)[TypeDelegationOffer-1].(*DelegationOffer)
	offer.ProofDigest = DigestBLAKE3
	return []struct {
		name string
		m    Message
	}{{"delegation_offer_blake3", offer}}
}

func fixtureBLAKE3Proof(tb testing.TB) ResultProof {
	p := fixtureResultProof(tb)
	p.Digest = DigestBLAKE3
	p.OfferHash = DigestBLAKE3.Sum([]byte("offer"))
	p.TranscriptHash = DigestBLAKE3.Sum([]byte("transcript"))
	p.OutputHash = OutputDigest(DigestBLAKE3, []Part{TextPart("the answer")})
	return p
}

func TestGoldenProofDigests(t *testing.T) {
	checkGoldenMessages(t, fixtureDigests(t), "protocol 1.6")
	t.Run("result_proof_blake3", func(t *testing.T) {
		checkGoldenProof(t, "result_proof_blake3", "made with BLAKE3, protocol 1.6", fixtureBLAKE3Proof(t))
	})
}

// TestDigestKnownAnswers: each digest is the hash its name says, checked
// against published vectors and, for inputs long enough to take BLAKE3's
// SIMD paths, against a second implementation of it.
func TestDigestKnownAnswers(t *testing.T) {
	vectors := []struct {
		d    ProofDigest
		in   string
		want string
	}{
		{DigestSHA256, "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{DigestBLAKE3, "", "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
		{DigestBLAKE3, "abc", "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"},
	}
	for _, v := range vectors {
		sum := v.d.Sum([]byte(v.in))
		if got := hex.EncodeToString(sum[:]); got != v.want {
			t.Errorf("%s(%q) = %s, want %s", v.d, v.in, got, v.want)
		}
		// Twice through Start: the second time on a recycled hasher.
		for range 2 {
			h := v.d.Start()
			h.Write([]byte(v.in[:len(v.in)/2]))
			h.Write([]byte(v.in[len(v.in)/2:]))
			sum := h.Finish()
			if got := hex.EncodeToString(sum[:]); got != v.want {
				t.Errorf("%s(%q) through Start = %s, want %s", v.d, v.in, got, v.want)
			}
		}
	}
	for _, n := range []int{1023, 1024, 1025, 64 << 10, 1<<20 + 7} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i % 251) // the BLAKE3 test vectors' input pattern
		}
		if got, want := DigestBLAKE3.Sum(b), lblake3.Sum256(b); got != want {
			t.Errorf("BLAKE3 of %d bytes: %x, the other implementation %x", n, got, want)
		}
		if got, want := DigestSHA256.Sum(b), sha256.Sum256(b); got != want {
			t.Errorf("SHA-256 of %d bytes: %x, want %x", n, got, want)
		}
	}
	if DigestSHA256.String() != "sha256" || DigestBLAKE3.String() != "blake3" || ProofDigest(9).Known() {
		t.Fatal("digest names")
	}
}

// TestFastestDigest: SHA-256 where a core has SHA instructions and no
// fast BLAKE3 lanes, BLAKE3 everywhere else.
func TestFastestDigest(t *testing.T) {
	cases := []struct {
		arch string
		f    cpuFeatures
		want ProofDigest
	}{
		{"amd64", cpuFeatures{x86AVX2: true, x86SHA: true}, DigestBLAKE3}, // Zen, Ice Lake and later
		{"amd64", cpuFeatures{x86AVX2: true}, DigestBLAKE3},               // Haswell to Comet Lake
		{"amd64", cpuFeatures{x86SHA: true}, DigestSHA256},                // Goldmont, Tremont
		{"amd64", cpuFeatures{}, DigestBLAKE3},                            // older x86
		{"arm64", cpuFeatures{arm64SHA2: true}, DigestSHA256},             // Apple, Graviton, Cortex-A76
		{"arm64", cpuFeatures{}, DigestBLAKE3},                            // Cortex-A72 without crypto (Raspberry Pi 4)
		{"riscv64", cpuFeatures{}, DigestBLAKE3},
	}
	for _, c := range cases {
		if got := fastestDigest(c.arch, c.f); got != c.want {
			t.Errorf("%s %+v: %s, want %s", c.arch, c.f, got, c.want)
		}
	}
}

// TestProofDigestSigned: a proof made with BLAKE3 says so in what is
// signed, so its digest cannot be relabelled without breaking the
// signature; and no proof or offer names a digest this build cannot make.
func TestProofDigestSigned(t *testing.T) {
	prov := peers(t).provider
	p := fixtureBLAKE3Proof(t)
	a, err := SignResultProof(prov, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyResultProof(prov.PeerID(), a)
	if err != nil || got.Digest != DigestBLAKE3 || got.OfferHash != p.OfferHash {
		t.Fatalf("verified %+v, %v", got, err)
	}
	// The same proof labelled SHA-256: one byte of the payload less (the
	// zero enum is left out), under the BLAKE3 proof's signature.
	relabelled := p
	relabelled.Digest = DigestSHA256
	payload, err := EncodeResultProof(relabelled)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(payload, a.Payload) {
		t.Fatal("the digest is not in the signed payload")
	}
	a.Payload = payload
	if _, err := VerifyResultProof(prov.PeerID(), a); err == nil {
		t.Fatal("a relabelled proof verified")
	}
	p.Digest = 5
	if _, err := SignResultProof(prov, p); !errors.Is(err, ErrUnknownEnum) {
		t.Fatalf("signed a proof of an unknown digest: %v", err)
	}
	offer := fixtureMessages(t)[TypeDelegationOffer-1].(*DelegationOffer)
	offer.ProofDigest = 5
	if _, err := EncodeMessage(offer); !errors.Is(err, ErrUnknownEnum) {
		t.Fatalf("encoded an offer asking for an unknown digest: %v", err)
	}
}
