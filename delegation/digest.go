package delegation

import (
	"crypto/sha256"
	"runtime"
	"sync"
	"sync/atomic"
)

// digest is the SHA-256 of an offer, computed beside the work that
// follows when the offer is large. Both sides need it only at the end (the
// provider to sign the result's proof, the requester to check it), and a
// megabyte takes about 5 ms to hash on a core without SHA instructions:
// time the round trip would otherwise spend waiting for it.
type digest struct {
	of     []byte // what is hashed; it must not change
	sum    [32]byte
	done   chan struct{} // nil: sum was computed at once
	start  sync.Once     // the hash's goroutine
	urgent atomic.Bool   // begin or get was called: no more yielding
}

// digestAsideMin is the size from which an offer is hashed on a goroutine
// of its own; below it, the hash costs less than starting one.
const digestAsideMin = 64 << 10

// digestOf starts hashing b, which the caller must not change afterwards.
func digestOf(b []byte) *digest {
	d := digestLater(b)
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
func digestLater(b []byte) *digest {
	d := &digest{of: b}
	if len(b) < digestAsideMin {
		d.sum = sha256.Sum256(b)
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

// idlePiece is what a background hash does between yields: about 40 µs
// of SHA-256 with SHA instructions, 0.3 ms without.
const idlePiece = 64 << 10

// run computes the hash, yielding between pieces until d is urgent.
func (d *digest) run() {
	defer close(d.done)
	h := sha256.New()
	b := d.of
	for len(b) > idlePiece && !d.urgent.Load() {
		h.Write(b[:idlePiece])
		b = b[idlePiece:]
		runtime.Gosched()
	}
	h.Write(b)
	h.Sum(d.sum[:0])
}

// get waits for the hash, starting it if need be.
func (d *digest) get() [32]byte {
	if d.done != nil {
		d.begin()
		<-d.done
	}
	return d.sum
}

// hashes reports whether d hashes b: the same memory.
func (d *digest) hashes(b []byte) bool {
	return d != nil && len(d.of) == len(b) && (len(b) == 0 || &d.of[0] == &b[0])
}

// sumOf is the SHA-256 of b: d's, when d hashed these very bytes (the same
// memory), else computed now.
func (d *digest) sumOf(b []byte) [32]byte {
	if !d.hashes(b) {
		return sha256.Sum256(b)
	}
	return d.get()
}
