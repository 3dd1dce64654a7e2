package crypto

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
)

// edgePoints are 32-byte encodings that verifiers disagree on: the points
// of small order (libsodium's list), the values of y at or above the field
// prime (non-canonical encodings), each with and without the sign bit.
var edgePoints = func() [][]byte {
	var out [][]byte
	for _, h := range []string{
		"0000000000000000000000000000000000000000000000000000000000000000", // order 4
		"0100000000000000000000000000000000000000000000000000000000000000", // the identity
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a", // order 8
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // p-1, order 2
		"edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // p, non-canonical 0
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // p+1, non-canonical 1
		"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // 2^255-1, not on the curve
	} {
		b, err := hex.DecodeString(h)
		if err != nil {
			panic(err)
		}
		neg := bytes.Clone(b)
		neg[31] |= 0x80
		out = append(out, b, neg)
	}
	return out
}()

// groupOrder is L, the order of the base point, little-endian.
var groupOrder, _ = hex.DecodeString("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")

// plusL is s + L: the same scalar mod L, encoded non-canonically.
func plusL(s []byte) []byte {
	out := make([]byte, 32)
	var carry uint16
	for i := range 32 {
		v := uint16(s[i]) + uint16(groupOrder[i]) + carry
		out[i], carry = byte(v), v>>8
	}
	return out
}

// sameVerdict reports a verdict of edVerify, or of a verifier of pub, that
// differs from crypto/ed25519's, and returns the verdict.
func sameVerdict(t testing.TB, pub, msg, sig []byte) bool {
	t.Helper()
	want := ed25519.Verify(pub, msg, sig)
	if got := edVerify(pub, msg, sig); got != want {
		t.Errorf("edVerify(%x, %x, %x) = %v, crypto/ed25519 says %v", pub, msg, sig, got, want)
	}
	if got := newVerifier(pub).verify(msg, sig); got != want {
		t.Errorf("verifier of %x: verify(%x, %x) = %v, crypto/ed25519 says %v", pub, msg, sig, got, want)
	}
	return want
}

// TestEd25519MatchesStdlib holds edSign and edVerify to crypto/ed25519:
// the same signature for every key and message, and the same verdict on
// valid signatures, damaged ones, S encoded non-canonically, and every
// combination of small-order and non-canonical points as the key and as
// R (where the rules of Ed25519 verifiers differ).
func TestEd25519MatchesStdlib(t *testing.T) {
	for i := range 64 {
		seed := sha256.Sum256(fmt.Appendf(nil, "key %d", i))
		priv := ed25519.NewKeyFromSeed(seed[:])
		pub := priv.Public().(ed25519.PublicKey)
		msg := bytes.Repeat([]byte{byte(i)}, i*37)
		want := ed25519.Sign(priv, msg)
		got := edSign(priv, msg)
		if !bytes.Equal(got, want) {
			t.Fatalf("key %d: edSign = %x, crypto/ed25519 signs %x", i, got, want)
		}
		if !sameVerdict(t, pub, msg, got) {
			t.Fatalf("key %d: a valid signature does not verify", i)
		}
		if sameVerdict(t, pub, msg, append(bytes.Clone(got[:32]), plusL(got[32:])...)) {
			t.Errorf("key %d: S + L verifies", i)
		}
		for _, bit := range []int{0, 255, 256, 511} {
			bad := bytes.Clone(got)
			bad[bit/8] ^= 1 << (bit % 8)
			if sameVerdict(t, pub, msg, bad) {
				t.Errorf("key %d: signature with bit %d flipped verifies", i, bit)
			}
		}
		if len(msg) > 0 && sameVerdict(t, pub, msg[1:], got) {
			t.Errorf("key %d: signature verifies another message", i)
		}
	}
	// Small-order and non-canonical keys and R, with S = 0, 1, and L (0
	// non-canonically). Some of these verify under crypto/ed25519's rules
	// (the identity as both key and R with S = 0, for one), which stricter
	// rule sets refuse; both must agree on every one.
	scalars := [][]byte{make([]byte, 32), append([]byte{1}, make([]byte, 31)...), plusL(make([]byte, 32))}
	valid := 0
	for _, a := range edgePoints {
		for _, r := range edgePoints {
			for _, s := range scalars {
				for _, msg := range [][]byte{nil, []byte("kith")} {
					if sameVerdict(t, a, msg, append(bytes.Clone(r), s...)) {
						valid++
					}
				}
			}
		}
	}
	if valid == 0 {
		t.Error("no edge case verified: the cases no longer tell lenient rules from strict ones")
	}
}

// FuzzEd25519 checks edVerify's verdict against crypto/ed25519's on any key,
// signature and message (the first 96 bytes are the key and signature),
// and edSign against crypto/ed25519 with the first 32 bytes as a seed.
func FuzzEd25519(f *testing.F) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	msg := []byte("a result proof")
	f.Add(append(append(bytes.Clone(priv.Public().(ed25519.PublicKey)), ed25519.Sign(priv, msg)...), msg...))
	f.Add(append(append(bytes.Clone(edgePoints[2]), edgePoints[2]...), make([]byte, 32)...))
	f.Add(append(append(bytes.Clone(edgePoints[10]), edgePoints[4]...), plusL(make([]byte, 32))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 96 {
			return
		}
		pub, sig, msg := data[:32], data[32:96], data[96:]
		sameVerdict(t, pub, msg, sig)
		priv := ed25519.NewKeyFromSeed(data[:32])
		want := ed25519.Sign(priv, msg)
		if got := edSign(priv, msg); !bytes.Equal(got, want) {
			t.Fatalf("edSign = %x, crypto/ed25519 signs %x", got, want)
		}
		if !sameVerdict(t, priv.Public().(ed25519.PublicKey), msg, want) {
			t.Fatal("a valid signature does not verify")
		}
	})
}

// BenchmarkEd25519 sets edSign and edVerify beside crypto/ed25519 on a
// result proof's size of message.
func BenchmarkEd25519(b *testing.B) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	pub := priv.Public().(ed25519.PublicKey)
	msg := bytes.Repeat([]byte{1}, 300)
	sig := ed25519.Sign(priv, msg)
	b.Run("stdlib/sign", func(b *testing.B) {
		for b.Loop() {
			ed25519.Sign(priv, msg)
		}
	})
	b.Run("kith/sign", func(b *testing.B) {
		for b.Loop() {
			edSign(priv, msg)
		}
	})
	b.Run("stdlib/verify", func(b *testing.B) {
		for b.Loop() {
			if !ed25519.Verify(pub, msg, sig) {
				b.Fatal("does not verify")
			}
		}
	})
	b.Run("kith/verify", func(b *testing.B) {
		for b.Loop() {
			if !edVerify(pub, msg, sig) {
				b.Fatal("does not verify")
			}
		}
	})
	b.Run("kith/verify-cached-key", func(b *testing.B) {
		v := newVerifier(pub)
		for b.Loop() {
			if !v.verify(msg, sig) {
				b.Fatal("does not verify")
			}
		}
	})
}
