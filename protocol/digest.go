package protocol

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"runtime"
	"sync"

	"github.com/klauspost/cpuid/v2"
	"github.com/zeebo/blake3"
	"golang.org/x/sys/cpu"

	"github.com/kithmesh/kith/protocol/pb"
)

// ProofDigest is the hash a result proof's digests are made with (1.6,
// ProofDigests): the offer's, the transcript's and the output's. The zero
// value is SHA-256, which every version uses and every proof before 1.6
// was made with.
type ProofDigest uint8

const (
	DigestSHA256 ProofDigest = iota // SHA-256 (FIPS 180-4)
	DigestBLAKE3                    // BLAKE3, 32-byte output, unkeyed
)

var digestNames = [...]string{"sha256", "blake3"}

// String is the digest's name as kith prints it before a hex digest
// ("blake3:…").
func (d ProofDigest) String() string {
	if int(d) < len(digestNames) {
		return digestNames[d]
	}
	return fmt.Sprintf("digest(%d)", uint8(d))
}

// Known reports whether this build can make and check digests of d.
func (d ProofDigest) Known() bool { return int(d) < len(digestNames) }

// Digester is a digest of d being made, piece by piece (Start): Write
// the pieces, then Finish.
type Digester struct {
	h     hash.Hash
	blake *blake3.Hasher // h, when it is BLAKE3: recycled by Finish
}

// blake3Hashers recycles BLAKE3's hashers: one is 10.8 KiB (its buffer
// and its stack of chaining values), and allocating and clearing one for
// each small digest cost more than the hashing (3.9 against 1.5 µs for
// 1 KiB); a delegation makes several small ones (transcript, output).
var blake3Hashers = sync.Pool{New: func() any { return blake3.New() }}

// Start begins a digest of d; d must be Known.
func (d ProofDigest) Start() Digester {
	if d == DigestBLAKE3 {
		b := blake3Hashers.Get().(*blake3.Hasher)
		return Digester{h: b, blake: b}
	}
	return Digester{h: sha256.New()}
}

// Write adds b to the digest.
func (g *Digester) Write(b []byte) { g.h.Write(b) }

// Finish is the digest of everything written. g must not be used after.
func (g *Digester) Finish() (sum [32]byte) {
	g.h.Sum(sum[:0])
	if g.blake != nil {
		g.blake.Reset()
		blake3Hashers.Put(g.blake)
	}
	*g = Digester{}
	return sum
}

// Sum is the digest of b made with d; d must be Known.
func (d ProofDigest) Sum(b []byte) [32]byte {
	if d == DigestBLAKE3 {
		return blake3.Sum256(b)
	}
	return sha256.Sum256(b)
}

// FastestDigest is the proof digest this machine makes fastest, which is
// the one a node asks for and agrees to. BLAKE3 takes SIMD lanes on
// amd64: with AVX2, 4.2 GB/s on one core of the AMD EPYC kith is
// benchmarked on, where SHA-256 with the SHA instructions takes 1.8 GB/s.
// Where a core has the SHA instructions but no AVX2 (Intel's Atom-class
// cores up to Tremont, in many small home servers), BLAKE3 has SSE4.1's
// four lanes only, about as fast as SHA-256 there by their designs (not
// measured here; SHA-256 is kept), and an arm64 core with the SHA-2
// instructions hashes SHA-256 at its own speed, where BLAKE3 there is
// portable Go: both keep SHA-256. With neither (a Raspberry Pi 4, older
// x86) BLAKE3's code is the faster (on that EPYC, both in portable code,
// the purego build tag: 0.58 against 0.23 GB/s).
func FastestDigest() ProofDigest {
	return fastestDigest(runtime.GOARCH, cpuFeatures{
		arm64SHA2: cpu.ARM64.HasSHA2,
		x86AVX2:   cpu.X86.HasAVX2,
		x86SHA:    cpuid.CPU.Supports(cpuid.SHA),
	})
}

// cpuFeatures is what FastestDigest's choice depends on.
type cpuFeatures struct{ arm64SHA2, x86AVX2, x86SHA bool }

func fastestDigest(arch string, f cpuFeatures) ProofDigest {
	switch {
	case arch == "arm64" && f.arm64SHA2,
		arch == "amd64" && !f.x86AVX2 && f.x86SHA:
		return DigestSHA256
	}
	return DigestBLAKE3
}

func digestToWire(d ProofDigest) pb.ProofDigest { return pb.ProofDigest(d) }

func digestFromWireEnum(name string, d pb.ProofDigest) (ProofDigest, error) {
	if d < 0 || int(d) >= len(digestNames) {
		return 0, within(name, fmt.Errorf("%w: proof digest %d", ErrUnknownEnum, int32(d)))
	}
	return ProofDigest(d), nil
}

func checkDigest(name string, d ProofDigest) error {
	if !d.Known() {
		return within(name, fmt.Errorf("%w: proof digest %d", ErrUnknownEnum, uint8(d)))
	}
	return nil
}
