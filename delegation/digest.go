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
// one starts at begin, or at get. The requester's starts once its offer
// is out, so that the hash does not take a core from the offer's
// encryption while it travels, but from the wait for the provider's answer.
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

// sumOf is the SHA-256 of b: d's, when d hashed these very bytes (the same
// memory), else computed now.
func (d *digest) sumOf(b []byte) [32]byte {
	if d == nil || len(d.of) != len(b) || (len(b) > 0 && &d.of[0] != &b[0]) {
		return sha256.Sum256(b)
	}
	return d.get()
}
