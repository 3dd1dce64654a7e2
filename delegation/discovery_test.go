package delegation

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
)

type staticFinder []peer.ID

func (f staticFinder) Candidates(context.Context, string) []peer.ID { return f }

// countQueries counts the capability queries n has sent.
func countQueries(n *testNode) int {
	n.traceMu.Lock()
	defer n.traceMu.Unlock()
	c := 0
	for _, t := range n.traced {
		if t == protocol.TypeCapabilityQuery {
			c++
		}
	}
	return c
}

// Gossiped adverts rank providers without a query to each: the requester
// asks only the winner, picks the one whose advert shows more free slots,
// and remembers the adverts across a restart (store-backed cache).
func TestAdvertsRankProvidersAndPersist(t *testing.T) {
	var finder staticFinder
	work := []Profile{{Profile: protocol.Profile{Name: "work", MaxBudgetTokens: 100}, Executor: executor.Echo{}}}
	nodes := newMesh(t, 3, func(i int, c *Config) {
		switch i {
		case 0:
			c.Profiles, c.Finder = nil, &finder
		case 1:
			c.Profiles, c.MaxRemoteConcurrent = work, 1
		case 2:
			c.Profiles, c.MaxRemoteConcurrent = work, 3
		}
	})
	req, small, big := nodes[0], nodes[1], nodes[2]
	finder = staticFinder{small.host.ID(), big.host.ID()}
	for _, p := range []*testNode{small, big} {
		signed, a, err := p.engine().Advert()
		if err != nil {
			t.Fatal(err)
		}
		if a.GrantedTrust != protocol.Untrusted || len(a.Profiles) != 1 {
			t.Fatalf("advert: %+v", a)
		}
		if err := req.engine().LearnAdvert(p.host.ID(), signed); err != nil {
			t.Fatal(err)
		}
	}
	d := delegateAndWait(t, req, Request{Profile: "work", Task: textTask("hi")})
	if d.State != protocol.StateCompleted || d.Peer != big.host.ID() {
		t.Fatalf("delegation went to %s in state %s; want the provider with more free slots %s", d.Peer, d.State, big.host.ID())
	}
	if n := countQueries(req); n != 1 {
		t.Fatalf("requester sent %d capability queries; adverts should leave only the winner to ask", n)
	}

	req.stop()
	req.start()
	known := req.engine().KnownCapabilities()
	if k, ok := known[small.host.ID()]; !ok || k.Source != capFromGossip {
		t.Fatalf("after restart, the small provider's advert is not known: %+v", known)
	}
	if k, ok := known[big.host.ID()]; !ok || !offers(&k.Assertion, "work") {
		t.Fatalf("after restart, the big provider's capabilities are not known: %+v", known)
	}
}

// Forged, expired and mismatched-peer assertions are refused, counted by
// reason, and never cached.
func TestBadAdvertsAreRejectedAndCounted(t *testing.T) {
	nodes := newMesh(t, 1, nil)
	e := nodes[0].engine()
	x, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	y, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	good := protocol.CapabilityAssertion{Versions: protocol.Supported, IssuedAt: now, ExpiresAt: now.Add(time.Minute)}

	aboutY := good
	aboutY.Provider = y.PeerID()
	payload, err := protocol.EncodeCapabilityAssertion(aboutY)
	if err != nil {
		t.Fatal(err)
	}
	mismatched := x.SignAssertion(crypto.DomainCapabilityAssertion, payload) // x signs about y
	forged, err := protocol.SignCapability(y, good)                          // y's, passed off as x's
	if err != nil {
		t.Fatal(err)
	}
	old := good
	old.IssuedAt, old.ExpiresAt = now.Add(-time.Hour), now.Add(-time.Minute)
	expired, err := protocol.SignCapability(x, old)
	if err != nil {
		t.Fatal(err)
	}
	for reason, a := range map[string]crypto.Assertion{
		RejectMismatchedPeer: mismatched, RejectForged: forged, RejectExpired: expired,
		RejectMalformed: {Payload: []byte{0xff}, Signature: x.SignAssertion(crypto.DomainCapabilityAssertion, []byte{0xff}).Signature},
	} {
		if err := e.LearnAdvert(x.PeerID(), a); err == nil {
			t.Errorf("%s: accepted", reason)
		}
		if n := e.CapabilityRejections()[reason]; n != 1 {
			t.Errorf("%s counted %d times, want 1 (all: %v)", reason, n, e.CapabilityRejections())
		}
	}
	if known := e.KnownCapabilities(); len(known) != 0 {
		t.Fatalf("a rejected assertion was cached: %+v", known)
	}
	ok, err := protocol.SignCapability(x, good)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.LearnAdvert(x.PeerID(), ok); err != nil {
		t.Fatalf("a good advert: %v", err)
	}
	// An older advert does not replace a newer one.
	older := good
	older.IssuedAt = now.Add(-time.Second)
	older.Capacity.FreeSlots = 9
	oldSigned, _ := protocol.SignCapability(x, older)
	if err := e.LearnAdvert(x.PeerID(), oldSigned); err != nil {
		t.Fatal(err)
	}
	if k := e.KnownCapabilities()[x.PeerID()]; k.Assertion.Capacity.FreeSlots == 9 {
		t.Fatal("an older advert replaced a newer one")
	}
	if !errors.Is(e.LearnAdvert(x.PeerID(), forged), crypto.ErrBadSignature) {
		t.Fatal("forged advert: want crypto.ErrBadSignature")
	}
}
