package crypto

import (
	"bytes"
	"testing"
	"time"
)

// Fixed keys so that fuzz seeds stay meaningful across runs.
func fuzzPair(f *testing.F) pair {
	f.Helper()
	a, err := IdentityFromSeed(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		f.Fatal(err)
	}
	b, err := IdentityFromSeed(bytes.Repeat([]byte{2}, 32))
	if err != nil {
		f.Fatal(err)
	}
	return pair{alice: a, bob: b}
}

// FuzzAccept feeds arbitrary Hello frames to a responder: it must return an
// error or a responder, never panic.
func FuzzAccept(f *testing.F) {
	p := fuzzPair(f)
	_, hello, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(hello)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00, 0x12, 0x00})
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		replay := NewMemoryReplayCache(nil)
		res, err := Accept(p.bob, b, AcceptParams{Remote: p.alice.PeerID(), Replay: replay})
		if err != nil {
			return
		}
		// Whatever was accepted must really be from Alice, to Bob.
		if res.Header().Sender != p.alice.PeerID() || res.Header().Recipient != p.bob.PeerID() {
			t.Fatalf("accepted header %+v", res.Header())
		}
	})
}

// FuzzOpenFrame feeds arbitrary sealed frames to both sides of an
// established stream.
func FuzzOpenFrame(f *testing.F) {
	p := fuzzPair(f)
	ini, _, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := ini.Seal([]byte("a valid frame"))
	f.Add(good)
	f.Add([]byte{})
	f.Add(make([]byte, FrameOverhead))
	f.Add(append(make([]byte, 8), bytes.Repeat([]byte{7}, 40)...))
	f.Fuzz(func(t *testing.T, frame []byte) {
		now := func() time.Time { return time.Now() }
		ini, hello, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: NewMemoryReplayCache(nil)})
		if err != nil {
			t.Fatal(err)
		}
		// A random frame cannot authenticate under a fresh random key.
		if _, err := res.Open(frame); err == nil {
			t.Fatal("responder opened a forged frame")
		}
		if _, err := ini.Open(frame); err == nil {
			t.Fatal("initiator opened a forged frame")
		}
	})
}

// FuzzParseHeader checks that header decoding never panics and that a
// decoded header re-encodes to bytes that decode to the same header.
func FuzzParseHeader(f *testing.F) {
	p := fuzzPair(f)
	ini, _, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3})
	f.Add(ini.Header().Marshal())
	f.Add([]byte{0x08, 0x01})
	offer, _, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3, Session: true})
	f.Add(offer.Header().Marshal())
	f.Add(Header{Version: SessionVersion, Type: 3, Sender: p.alice.PeerID(), Recipient: p.bob.PeerID(), StreamSeq: 7,
		IssuedAt: time.UnixMilli(1), ExpiresAt: time.UnixMilli(2)}.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			return
		}
		h2, err := ParseHeader(h.Marshal())
		if err != nil {
			t.Fatalf("re-encoded header does not parse: %v", err)
		}
		if h2.Sender != h.Sender || h2.Recipient != h.Recipient || h2.MessageID != h.MessageID ||
			!h2.IssuedAt.Equal(h.IssuedAt) || !h2.ExpiresAt.Equal(h.ExpiresAt) || !bytes.Equal(h2.Enc, h.Enc) ||
			h2.Version != h.Version || h2.Type != h.Type || h2.SessionOffer != h.SessionOffer ||
			h2.SessionID != h.SessionID || h2.StreamSeq != h.StreamSeq {
			t.Fatalf("round trip changed header: %+v vs %+v", h, h2)
		}
	})
}

// FuzzAcceptSession feeds arbitrary Hello frames to a responder that holds
// an envelope session with the sender: session stream hellos (header
// version 2, MAC) reach the session lookup, the MAC check and the stream
// window. It must return an error or a responder for a stream of that
// session from Alice, never panic.
func FuzzAcceptSession(f *testing.F) {
	p := fuzzPair(f)
	p.replay = NewMemoryReplayCache(nil)
	p.setUp(f, nil)
	for range 3 {
		_, hello := p.dialSession(f, nil)
		f.Add(hello)
	}
	_, offer, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3, Session: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(offer)
	f.Add([]byte{0x0a, 0x02, 0x08, 0x02, 0x1a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := p.acceptSession(b, nil)
		if err != nil {
			return
		}
		h := res.Header()
		if h.Sender != p.alice.PeerID() || h.Recipient != p.bob.PeerID() {
			t.Fatalf("accepted header %+v", h)
		}
	})
}

// FuzzSessionControl feeds arbitrary control frames to an opener that
// offered a session and to one whose stream runs in a session: only the
// true ack may install a session, and nothing panics.
func FuzzSessionControl(f *testing.F) {
	p := fuzzPair(f)
	p.replay = NewMemoryReplayCache(nil)
	f.Add([]byte{})
	f.Add(RejectFrame())
	f.Add(make([]byte, AckSize))
	f.Add(make([]byte, FrameOverhead))
	f.Fuzz(func(t *testing.T, frame []byte) {
		alice, _ := IdentityFromSeed(bytes.Repeat([]byte{1}, 32)) // no sessions yet
		q := pair{alice: alice, bob: p.bob, replay: p.replay}
		ini, _ := q.dialSession(t, nil)
		if err := ini.Control(frame); err == nil {
			t.Fatal("an opener took a forged ack")
		}
		if out, _ := alice.sessions.counts(); out != 0 {
			t.Fatal("a forged control frame installed a session")
		}
	})
}
