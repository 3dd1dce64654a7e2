package crypto

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"
)

// SealOpenRates are what BenchSealOpen measured, in bytes of plaintext
// sealed and opened per second.
type SealOpenRates struct {
	Envelope float64 // one frame sealed and opened on an envelope session stream
	Raw      float64 // AES-256-GCM seal and open of the same plaintext
}

// Ratio is Envelope / Raw: 1 means the envelope costs nothing over the
// cipher itself.
func (r SealOpenRates) Ratio() float64 { return r.Envelope / r.Raw }

// BenchSealOpen measures the envelope's frame path against raw AES-256-GCM
// in the same run, both into reused buffers as protocol.Conn uses them: the
// opener seals a size-byte plaintext on a session stream (protocol 1.2) and
// the responder opens it in place, against one AES-256-GCM seal and
// in-place open. The two alternate in short rounds for about d in all, so
// both see the same machine load. kith bench reports the ratio.
func BenchSealOpen(size int, d time.Duration) (SealOpenRates, error) {
	if size <= 0 || d <= 0 {
		return SealOpenRates{}, fmt.Errorf("crypto: BenchSealOpen(%d, %s): size and duration must be positive", size, d)
	}
	a, err := GenerateIdentity()
	if err != nil {
		return SealOpenRates{}, err
	}
	b, err := GenerateIdentity()
	if err != nil {
		return SealOpenRates{}, err
	}
	replay := NewMemoryReplayCache(nil)
	stream := func() (*Initiator, *Responder, error) {
		ini, hello, err := Dial(a, b.PeerID(), DialParams{Session: true})
		if err != nil {
			return nil, nil, err
		}
		res, err := Accept(b, hello, AcceptParams{Remote: a.PeerID(), Replay: replay, Sessions: true})
		if err != nil {
			return nil, nil, err
		}
		if ack := res.Ack(); ack != nil {
			if err := ini.Control(ack); err != nil {
				return nil, nil, err
			}
		}
		ini.Settle()
		return ini, res, nil
	}
	if _, _, err := stream(); err != nil { // the setup stream
		return SealOpenRates{}, err
	}
	ini, res, err := stream()
	if err != nil {
		return SealOpenRates{}, err
	}
	if !ini.InSession() {
		return SealOpenRates{}, fmt.Errorf("crypto: BenchSealOpen: no session was set up")
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	raw, err := newGCM(key)
	if err != nil {
		return SealOpenRates{}, err
	}
	pt := make([]byte, size)
	buf := make([]byte, 0, size+FrameOverhead)
	var nonce [12]byte
	var seq uint64
	rawRound := func() error {
		seq++
		binary.BigEndian.PutUint64(nonce[4:], seq)
		ct := raw.Seal(buf[:0], nonce[:], pt, nil)
		_, err := raw.Open(ct[:0], nonce[:], ct, nil)
		return err
	}
	envRound := func() error {
		f, err := ini.AppendSeal(buf[:0], pt)
		if err != nil {
			return err
		}
		_, err = res.OpenInPlace(f)
		return err
	}
	var envBytes, rawBytes float64
	var envTime, rawTime time.Duration
	slice := max(d/20, time.Millisecond)
	for start := time.Now(); time.Since(start) < d; {
		for _, run := range []struct {
			round func() error
			bytes *float64
			took  *time.Duration
		}{{rawRound, &rawBytes, &rawTime}, {envRound, &envBytes, &envTime}} {
			t0 := time.Now()
			for time.Since(t0) < slice {
				if err := run.round(); err != nil {
					return SealOpenRates{}, err
				}
				*run.bytes += float64(size)
			}
			*run.took += time.Since(t0)
		}
	}
	return SealOpenRates{Envelope: envBytes / envTime.Seconds(), Raw: rawBytes / rawTime.Seconds()}, nil
}
