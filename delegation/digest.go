package delegation

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/kithmesh/kith/protocol"
)

// digest is the proof digest of an offer (SHA-256 or, from 1.6, BLAKE3),
// computed beside the work that follows when the offer is large. Both
// sides need it only at the end (the provider to sign the result's proof,
// the requester to check it), and a megabyte takes 0.25–0.6 ms to hash
// with SIMD or SHA instructions, about 5 ms on a core with neither: time
// the round trip would otherwise spend waiting for it.
type digest struct {
	alg    protocol.ProofDigest
	of     []byte // what is hashed; it must not change
	sum    [32]byte
	done   chan struct{} // nil: sum was computed at once
	start  sync.Once     // the hash's goroutine
	urgent atomic.Bool   // begin or get was called: no more yielding
}

// digestAsideMin is the size from which an offer is hashed on a goroutine
// of its own; below it, the hash costs less than starting one.
const digestAsideMin = 64 << 10

// digestOf starts hashing b with alg; the caller must not change b
// afterwards.
func digestOf(alg protocol.ProofDigest, b []byte) *digest {
	d := digestLater(alg, b)
	d.begin()
	return d
}

// digestLater is digestOf for a hash that should not start yet: a large
// one starts at begin or beginIdle, or at get. The requester's starts in
// the background once the offer is out (beginIdle, in attempt), and goes
// on at full speed once the result is in (checkProof): begun at full
// speed any earlier, on a machine that runs both sides, it took a core
// from the provider's own hashes. The provider's starts once its offer's
// file is being written (serveOffer).
func digestLater(alg protocol.ProofDigest, b []byte) *digest {
	d := &digest{alg: alg, of: b}
	if len(b) < digestAsideMin {
		d.sum = alg.Sum(b)
		return d
	}
	d.done = make(chan struct{})
	return d
}

// begin starts the hash, if it has not started, and has a hash begun by
// beginIdle go on without yielding.
func (d *digest) begin() {
	if d.done == nil {
		return
	}
	d.urgent.Store(true)
	d.beginIdle() // urgent already: run does not yield
}

// beginIdle starts the hash in the background, if it has not started: a
// piece of idlePiece bytes at a time, the goroutine yielding its
// processor after each (runtime.Gosched), so that goroutines waiting for
// one run first, until begin or get asks for the rest. A requester waits
// for its provider with idle cores the hash can use, beside a provider
// whose work must not wait behind it on a machine that runs both.
func (d *digest) beginIdle() {
	if d.done == nil {
		return
	}
	d.start.Do(func() { go d.run() })
}

// idlePiece is what a background hash does between yields: about 15 µs
// of BLAKE3 with AVX2, 40 µs of SHA-256 with SHA instructions, 0.3 ms of
// SHA-256 with neither.
const idlePiece = 64 << 10

// run computes the hash, yielding between pieces until d is urgent.
func (d *digest) run() {
	defer close(d.done)
	h := d.alg.Start()
	b := d.of
	for len(b) > idlePiece && !d.urgent.Load() {
		h.Write(b[:idlePiece])
		b = b[idlePiece:]
		runtime.Gosched()
	}
	h.Write(b)
	d.sum = h.Finish()
}

// get waits for the hash, starting it if need be.
func (d *digest) get() [32]byte {
	if d.done != nil {
		d.begin()
		<-d.done
	}
	return d.sum
}

// hashes reports whether d hashes b with alg: the same memory.
func (d *digest) hashes(alg protocol.ProofDigest, b []byte) bool {
	return d != nil && d.alg == alg && len(d.of) == len(b) && (len(b) == 0 || &d.of[0] == &b[0])
}

// sumOf is the digest of b made with alg: d's, when d hashed these very
// bytes (the same memory) with alg, else computed now.
func (d *digest) sumOf(alg protocol.ProofDigest, b []byte) [32]byte {
	if !d.hashes(alg, b) {
		return alg.Sum(b)
	}
	return d.get()
}
