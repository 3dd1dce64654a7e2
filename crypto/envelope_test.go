package crypto

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

type pair struct {
	alice, bob *Identity
	replay     *MemoryReplayCache
}

func newPair(t testing.TB) pair {
	t.Helper()
	a, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	b, err := GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return pair{alice: a, bob: b, replay: NewMemoryReplayCache(nil)}
}

// open runs Dial from alice to bob and Accept on bob's side.
func (p pair) open(t testing.TB) (*Initiator, *Responder, []byte) {
	t.Helper()
	ini, hello, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 3})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
	if err != nil {
		t.Fatal(err)
	}
	return ini, res, hello
}

func TestEnvelopeRoundTripBothDirections(t *testing.T) {
	p := newPair(t)
	ini, res, _ := p.open(t)
	if res.Header().Sender != p.alice.PeerID() || res.Header().Type != 3 {
		t.Fatalf("responder header %+v", res.Header())
	}
	for i := 0; i < 5; i++ {
		msg := []byte(fmt.Sprintf("offer %d", i))
		f, err := ini.Seal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(f, msg) {
			t.Fatal("plaintext visible in sealed frame")
		}
		got, err := res.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("got %q want %q", got, msg)
		}
		reply := []byte(fmt.Sprintf("status %d", i))
		f, err = res.Seal(reply)
		if err != nil {
			t.Fatal(err)
		}
		got, err = ini.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, reply) {
			t.Fatalf("got %q want %q", got, reply)
		}
	}
}

// The two directions use different keys: a frame reflected back to its
// sender does not open.
func TestEnvelopeReflectionFails(t *testing.T) {
	p := newPair(t)
	ini, res, _ := p.open(t)
	f, _ := ini.Seal([]byte("hello"))
	if _, err := ini.Open(f); !errors.Is(err, ErrTampered) {
		t.Fatalf("reflected frame: got %v, want ErrTampered", err)
	}
	f, _ = res.Seal([]byte("back"))
	if _, err := res.Open(f); !errors.Is(err, ErrTampered) {
		t.Fatalf("reflected frame: got %v, want ErrTampered", err)
	}
}

func TestEnvelopeAttacks(t *testing.T) {
	t.Run("flip ciphertext bit", func(t *testing.T) {
		p := newPair(t)
		ini, res, _ := p.open(t)
		f, _ := ini.Seal([]byte("task text"))
		for i := seqSize; i < len(f); i++ {
			g := bytes.Clone(f)
			g[i] ^= 0x01
			if _, err := res.Open(g); !errors.Is(err, ErrTampered) {
				t.Fatalf("bit flip at %d: got %v, want ErrTampered", i, err)
			}
		}
		// The untouched frame still opens: failures changed nothing.
		if _, err := res.Open(f); err != nil {
			t.Fatalf("original frame after rejected tampering: %v", err)
		}
	})
	t.Run("flip responder frame bit", func(t *testing.T) {
		p := newPair(t)
		ini, res, _ := p.open(t)
		f, _ := res.Seal([]byte("result"))
		f[len(f)-1] ^= 0x80
		if _, err := ini.Open(f); !errors.Is(err, ErrTampered) {
			t.Fatalf("got %v, want ErrTampered", err)
		}
	})
	t.Run("replay a frame", func(t *testing.T) {
		p := newPair(t)
		ini, res, _ := p.open(t)
		f, _ := ini.Seal([]byte("one"))
		if _, err := res.Open(f); err != nil {
			t.Fatal(err)
		}
		if _, err := res.Open(f); !errors.Is(err, ErrReplayed) {
			t.Fatalf("got %v, want ErrReplayed", err)
		}
	})
	t.Run("reorder frames", func(t *testing.T) {
		p := newPair(t)
		ini, res, _ := p.open(t)
		f0, _ := ini.Seal([]byte("zero"))
		f1, _ := ini.Seal([]byte("one"))
		if _, err := res.Open(f1); !errors.Is(err, ErrOutOfOrder) {
			t.Fatalf("got %v, want ErrOutOfOrder", err)
		}
		if _, err := res.Open(f0); err != nil {
			t.Fatalf("in-order frame after rejected reorder: %v", err)
		}
		if _, err := res.Open(f1); err != nil {
			t.Fatalf("second frame in order: %v", err)
		}
	})
	t.Run("forge sequence number", func(t *testing.T) {
		p := newPair(t)
		ini, res, _ := p.open(t)
		f0, _ := ini.Seal([]byte("zero"))
		f1, _ := ini.Seal([]byte("one"))
		// Relabel frame 1 as frame 0: the nonce no longer matches.
		copy(f1[:seqSize], f0[:seqSize])
		if _, err := res.Open(f1); !errors.Is(err, ErrTampered) {
			t.Fatalf("got %v, want ErrTampered", err)
		}
	})
	t.Run("replay a whole stream", func(t *testing.T) {
		p := newPair(t)
		_, _, hello := p.open(t)
		_, err := Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if !errors.Is(err, ErrReplayed) {
			t.Fatalf("got %v, want ErrReplayed", err)
		}
	})
	t.Run("send to the wrong peer", func(t *testing.T) {
		p := newPair(t)
		carol, _ := GenerateIdentity()
		_, hello, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Accept(carol, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if !errors.Is(err, ErrWrongRecipient) {
			t.Fatalf("got %v, want ErrWrongRecipient", err)
		}
	})
	t.Run("relay someone else's hello", func(t *testing.T) {
		p := newPair(t)
		mallory, _ := GenerateIdentity()
		_, hello, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1})
		_, err := Accept(p.bob, hello, AcceptParams{Remote: mallory.PeerID(), Replay: p.replay})
		if !errors.Is(err, ErrSenderMismatch) {
			t.Fatalf("got %v, want ErrSenderMismatch", err)
		}
	})
	t.Run("forge a signature", func(t *testing.T) {
		p := newPair(t)
		mallory, _ := GenerateIdentity()
		_, hello, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1})
		hl, err := ParseHello(hello)
		if err != nil {
			t.Fatal(err)
		}
		// Mallory signs Alice's header with her own key.
		hl.Signature = mallory.sign(signingInput(DomainEnvelopeHeader, hl.Header))
		_, err = Accept(p.bob, hl.Marshal(), AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if !errors.Is(err, ErrBadSignature) {
			t.Fatalf("got %v, want ErrBadSignature", err)
		}
	})
	t.Run("edit a signed header", func(t *testing.T) {
		p := newPair(t)
		_, hello, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1})
		hl, _ := ParseHello(hello)
		h, _ := ParseHeader(hl.Header)
		h.ExpiresAt = h.ExpiresAt.Add(24 * time.Hour)
		hl.Header = h.Marshal()
		_, err := Accept(p.bob, hl.Marshal(), AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if !errors.Is(err, ErrBadSignature) {
			t.Fatalf("got %v, want ErrBadSignature", err)
		}
	})
	t.Run("stale timestamp", func(t *testing.T) {
		p := newPair(t)
		past := func() time.Time { return time.Now().Add(-time.Hour) }
		_, hello, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1, TTL: time.Minute, Now: past})
		_, err := Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if !errors.Is(err, ErrExpired) {
			t.Fatalf("got %v, want ErrExpired", err)
		}
	})
	t.Run("too far in the future", func(t *testing.T) {
		p := newPair(t)
		future := func() time.Time { return time.Now().Add(time.Hour) }
		_, hello, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1, Now: future})
		_, err := Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if !errors.Is(err, ErrFromFuture) {
			t.Fatalf("got %v, want ErrFromFuture", err)
		}
	})
	t.Run("swap encapsulated key", func(t *testing.T) {
		p := newPair(t)
		ini, _, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1})
		_, hello2, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1})
		// A valid hello from another stream cannot open this stream's frames.
		res, err := Accept(p.bob, hello2, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if err != nil {
			t.Fatal(err)
		}
		f, _ := ini.Seal([]byte("x"))
		if _, err := res.Open(f); !errors.Is(err, ErrTampered) {
			t.Fatalf("got %v, want ErrTampered", err)
		}
	})
}

// A rejected hello must not burn its message ID: the replay cache records
// only envelopes that passed every other check.
func TestRejectedHelloChangesNothing(t *testing.T) {
	p := newPair(t)
	mallory, _ := GenerateIdentity()
	_, hello, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1})
	if _, err := Accept(p.bob, hello, AcceptParams{Remote: mallory.PeerID(), Replay: p.replay}); !errors.Is(err, ErrSenderMismatch) {
		t.Fatalf("got %v", err)
	}
	if _, err := Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay}); err != nil {
		t.Fatalf("legitimate hello after a rejected copy: %v", err)
	}
}

func TestMalformedHelloAndHeader(t *testing.T) {
	p := newPair(t)
	_, hello, _ := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1})
	for i := 0; i < len(hello); i++ {
		_, err := Accept(p.bob, hello[:i], AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay})
		if err == nil {
			t.Fatalf("truncated hello (%d of %d bytes) accepted", i, len(hello))
		}
	}
	if _, err := ParseHello(make([]byte, MaxHelloSize+1)); !errors.Is(err, ErrMalformedHeader) {
		t.Fatalf("oversized hello: %v", err)
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	p := newPair(t)
	ini, _, _ := p.open(t)
	h := ini.Header()
	got, err := ParseHeader(h.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if got.Sender != h.Sender || got.Recipient != h.Recipient || got.MessageID != h.MessageID ||
		!got.IssuedAt.Equal(h.IssuedAt) || !got.ExpiresAt.Equal(h.ExpiresAt) || !bytes.Equal(got.Enc, h.Enc) ||
		got.Type != h.Type || got.Version != h.Version {
		t.Fatalf("round trip: got %+v want %+v", got, h)
	}
}
