package crypto

import (
	"errors"
	"testing"
	"time"
)

// signedHello is a Hello from alice to bob, signed by alice, with the
// times given: what a peer running modified code could send.
func (p pair) signedHello(t *testing.T, issued, expires time.Time, id MessageID) []byte {
	t.Helper()
	_, hello, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1})
	if err != nil {
		t.Fatal(err)
	}
	hl, _ := ParseHello(hello)
	h, _ := ParseHeader(hl.Header)
	h.IssuedAt, h.ExpiresAt, h.MessageID = issued, expires, id
	raw := h.Marshal()
	return Hello{Header: raw, Signature: p.alice.sign(signingInput(DomainEnvelopeHeader, raw))}.Marshal()
}

// TestEnvelopeLifetimeCap: a header may live at most MaxEnvelopeTTL plus
// the receiver's skew from issued_at to expires_at. A header issued a year
// ago that expires in a hundred years is refused before it reaches the
// replay cache, and so is one a millisecond over the cap.
func TestEnvelopeLifetimeCap(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond)
	const skew = 10 * time.Second
	tests := []struct {
		name            string
		issued, expires time.Time
		want            error
	}{
		{"a year old, a century to go", now.AddDate(-1, 0, 0), now.AddDate(100, 0, 0), ErrLifetimeTooLong},
		{"fresh, a day to go", now, now.Add(24 * time.Hour), ErrLifetimeTooLong},
		{"a millisecond over the cap", now, now.Add(MaxEnvelopeTTL + skew + time.Millisecond), ErrLifetimeTooLong},
		{"exactly the cap", now, now.Add(MaxEnvelopeTTL + skew), nil},
		{"the default TTL", now, now.Add(DefaultEnvelopeTTL), nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(t)
			hello := p.signedHello(t, tt.issued, tt.expires, MessageID{byte(i + 1)})
			_, err := Accept(p.bob, hello, AcceptParams{Remote: p.alice.PeerID(), Replay: p.replay, MaxSkew: skew, Now: func() time.Time { return now }})
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Accept = %v, want success", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Accept = %v, want %v", err, tt.want)
			}
			if n := len(p.replay.seen); n != 0 {
				t.Fatalf("a refused header left %d replay entries", n)
			}
		})
	}
}

// Dial refuses to write a header that receivers would refuse.
func TestDialRefusesLongTTL(t *testing.T) {
	p := newPair(t)
	if _, _, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1, TTL: MaxEnvelopeTTL + time.Millisecond}); !errors.Is(err, ErrLifetimeTooLong) {
		t.Fatalf("Dial with a TTL over the cap = %v, want ErrLifetimeTooLong", err)
	}
	if _, _, err := Dial(p.alice, p.bob.PeerID(), DialParams{Type: 1, TTL: MaxEnvelopeTTL}); err != nil {
		t.Fatalf("Dial with the largest TTL: %v", err)
	}
}

// TestMemoryReplayCacheFull: the in-memory cache has the store's policy: a
// full cache refuses new IDs (ErrReplayCacheFull) and never forgets a live
// one.
func TestMemoryReplayCacheFull(t *testing.T) {
	p := newPair(t)
	now := time.Now()
	p.replay.Max = 3
	clock := now
	p.replay.now = func() time.Time { return clock }
	for i := range 3 {
		if seen, err := p.replay.CheckAndRemember(p.alice.PeerID(), MessageID{byte(i)}, now.Add(time.Duration(i+1)*time.Minute)); seen || err != nil {
			t.Fatalf("entry %d: seen %v, err %v", i, seen, err)
		}
	}
	if _, err := p.replay.CheckAndRemember(p.alice.PeerID(), MessageID{9}, now.Add(time.Minute)); !errors.Is(err, ErrReplayCacheFull) {
		t.Fatalf("full cache: %v, want ErrReplayCacheFull", err)
	}
	if seen, _ := p.replay.CheckAndRemember(p.alice.PeerID(), MessageID{0}, now.Add(time.Minute)); !seen {
		t.Fatal("a full cache forgot a live entry")
	}
	clock = now.Add(time.Minute) // entry 0 expires
	if _, err := p.replay.CheckAndRemember(p.alice.PeerID(), MessageID{9}, now.Add(time.Hour)); err != nil {
		t.Fatalf("after an expiry: %v", err)
	}
}
