package bench

import (
	"fmt"
	"slices"
	"time"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// CryptoWork is the cryptography a delegation's protocol does over its
// payload, beyond what a bare stream's TLS does over the same bytes, timed
// on one core: the proof's digest of the offer and of the output (the
// digest two nodes on this machine agree on, protocol.FastestDigest), each
// computed by both sides (four passes), and the envelope's seal and open
// of the task and of the result (two passes each way). None of it can go:
// the hashes are what the signed proof binds, and the envelope is what
// keeps a payload sealed end to end, whatever relays it. A large
// delegation needs at least this much CPU beside its bare copy's.
type CryptoWork struct {
	// Hashes is the four passes, the median of cryptoWorkRuns.
	Hashes time.Duration `json:"hashes_ns"`
	// Digest names the hash of those passes ("blake3", "sha256").
	Digest string `json:"digest"`
	// Envelope is sealing and opening the payload twice, at the rate an
	// envelope session stream seals and opens chunk frames on this CPU.
	Envelope time.Duration `json:"envelope_ns"`
}

// Total is all of it, on one core.
func (c CryptoWork) Total() time.Duration { return c.Hashes + c.Envelope }

// cryptoWorkRuns is how many times the hashes are timed.
const cryptoWorkRuns = 5

// measureCryptoWork times the protocol's cryptography over a payload of
// text (the offer's hash is taken over the payload alone, a few hundred
// bytes short of the offer's encoding). envelopeFor is how long the
// envelope takes to seal and open n bytes.
func measureCryptoWork(text []byte, envelopeFor func(n int) time.Duration) CryptoWork {
	out := []protocol.Part{protocol.TextPart(string(text))}
	alg := protocol.FastestDigest()
	runs := make([]time.Duration, 0, cryptoWorkRuns)
	for range cryptoWorkRuns {
		t0 := time.Now()
		for range 2 { // the requester's and the provider's
			_ = alg.Sum(text)
			_ = protocol.OutputDigest(alg, out)
		}
		runs = append(runs, time.Since(t0))
	}
	slices.Sort(runs)
	return CryptoWork{Hashes: runs[len(runs)/2], Digest: alg.String(), Envelope: 2 * envelopeFor(len(text))}
}

// envelopeRate measures how fast an envelope session stream seals and
// opens chunk frames here, in plaintext bytes per second, and returns the
// time it takes for n bytes.
func envelopeRate(d time.Duration) (func(n int) time.Duration, error) {
	r, err := crypto.BenchSealOpen(protocol.ChunkSize, d)
	if err != nil {
		return nil, fmt.Errorf("bench: envelope rate: %w", err)
	}
	if r.Envelope <= 0 {
		return nil, fmt.Errorf("bench: envelope rate: nothing sealed in %s", d)
	}
	return func(n int) time.Duration {
		return time.Duration(float64(n) / r.Envelope * float64(time.Second))
	}, nil
}
