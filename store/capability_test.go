package store

import (
	"errors"
	"testing"
	"time"

	"github.com/kithmesh/kith/crypto"
)

func TestCapabilityCacheSurvivesRestartUntilExpiry(t *testing.T) {
	clk := newFakeClock()
	s, dir := openTest(t, Options{Now: clk.Now})
	a, b := newPeerID(t), newPeerID(t)
	c := Capability{
		Peer: a, Signed: crypto.Assertion{Payload: []byte("payload"), Signature: make([]byte, 64)},
		Source: "query", ReceivedAt: clk.Now(), ExpiresAt: clk.Now().Add(time.Minute),
	}
	if err := s.PutCapability(c); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCapability(Capability{Peer: b, Signed: c.Signed, ExpiresAt: clk.Now().Add(-time.Second)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("expired capability: got %v, want ErrInvalid", err)
	}
	// A newer one replaces the older.
	c.Source, c.ExpiresAt = "gossip", clk.Now().Add(2*time.Minute)
	if err := s.PutCapability(c); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, dir, Options{Now: clk.Now})
	got, err := s.ListCapabilities()
	if err != nil || len(got) != 1 {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
	if g := got[0]; g.Peer != a || g.Source != "gossip" || string(g.Signed.Payload) != "payload" || !g.ExpiresAt.Equal(c.ExpiresAt) {
		t.Fatalf("after reopen: %+v", g)
	}
	clk.Add(3 * time.Minute)
	if got, err := s.ListCapabilities(); err != nil || len(got) != 0 {
		t.Fatalf("after expiry: %+v, %v", got, err)
	}
}
