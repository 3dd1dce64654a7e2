package delegation

import (
	"crypto/sha256"
	"sync"
)

// digest is the SHA-256 of an offer, computed beside the work that
// follows when the offer is large. Both sides need it only at the end (the
// provider to sign the result's proof, the requester to check it), and a
// megabyte takes about 5 ms to hash on a core without SHA instructions:
// time the round trip would otherwise spend waiting for it.
type digest struct {
	of    []byte // what is hashed; it must not change
	sum   [32]byte
	done  chan struct{} // nil: sum was computed at once
	start sync.Once     // the hash's goroutine
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
// one starts at begin, or at get. The requester's starts once the result
// is in (checkProof), beside the output's hash and the result's write: on
// a machine that runs both sides, begun any earlier it took a core from
// the offer's encryption or from the provider's own hashes. The
// provider's starts once its offer's file is being written (serveOffer).
func digestLater(b []byte) *digest {
	d := &digest{of: b}
	if len(b) < digestAsideMin {
		d.sum = sha256.Sum256(b)
		return d
	}
	d.done = make(chan struct{})
	return d
}

// begin starts the hash, if it has not started.
func (d *digest) begin() {
	if d.done == nil {
		return
	}
	d.start.Do(func() {
		go func() {
			defer close(d.done)
			d.sum = sha256.Sum256(d.of)
		}()
	})
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
