package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/protocol"
)

// capability signs a capability assertion by id with the given load,
// issued at issued and valid for ttl.
func capability(tb testing.TB, id *crypto.Identity, active uint32, issued time.Time, ttl time.Duration) crypto.Assertion {
	tb.Helper()
	a, err := protocol.SignCapability(id, protocol.CapabilityAssertion{
		Profiles:     []protocol.Profile{{Name: "llm", MaxBudgetTokens: 4096}},
		Capacity:     protocol.Capacity{Active: active, FreeSlots: 4 - min(active, 4)},
		Versions:     protocol.Supported,
		GrantedTrust: protocol.Verified,
		IssuedAt:     issued,
		ExpiresAt:    issued.Add(ttl),
	})
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

func advertBytes(tb testing.TB, a crypto.Assertion) []byte {
	tb.Helper()
	b, err := protocol.EncodeAdvert(a)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func connect(tb testing.TB, mn mocknet.Mocknet, a, b host.Host) {
	tb.Helper()
	if _, err := mn.ConnectPeers(a.ID(), b.ID()); err != nil {
		tb.Fatal(err)
	}
}

// startGossip starts gossip on h and joins the topic of the profile
// "llm", which capability() advertises.
func startGossip(tb testing.TB, h host.Host, cfg GossipConfig) *Gossip {
	tb.Helper()
	g, err := NewGossip(context.Background(), h, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := g.Serve([]string{"llm"}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := g.Close(); err != nil {
			tb.Error(err)
		}
	})
	return g
}

// TestGossipLoadChangeReachesAll: 20 nodes in a sparse random mesh; one
// node's load changes ten times, and every change reaches all 19 others.
func TestGossipLoadChangeReachesAll(t *testing.T) {
	checkNoLeaks(t)
	const nodes, changes = 20, 10
	const bound = 20 * time.Second // liveness, not performance
	mn, hosts, ids := mockKithHosts(t, nodes)
	rng := rand.New(rand.NewPCG(9, 10))
	links := 0
	for i := 1; i < nodes; i++ {
		connect(t, mn, hosts[i], hosts[rng.IntN(i)]) // a random tree keeps it connected
		links++
	}
	for range nodes {
		a, b := rng.IntN(nodes), rng.IntN(nodes)
		if a != b {
			connect(t, mn, hosts[a], hosts[b])
			links++
		}
	}

	type sighting struct {
		node   int
		active uint32
	}
	seen := make(chan sighting, 2048) // more than the warm-up and the changes can fill
	gs := make([]*Gossip, nodes)
	counters := make([]*Counters, nodes)
	pub := hosts[0].ID()
	for i, h := range hosts {
		counters[i] = &Counters{}
		gs[i] = startGossip(t, h, GossipConfig{
			Counters: counters[i],
			OnAdvert: func(a Advert) {
				if a.From == pub {
					seen <- sighting{i, a.Assertion.Capacity.Active}
				}
			},
		})
	}

	// waitAll publishes load active and returns how long until all 19
	// others saw it.
	issued := time.Now().Truncate(time.Millisecond)
	waitAll := func(active uint32) time.Duration {
		t.Helper()
		issued = issued.Add(time.Second)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		if err := gs[0].Publish(ctx, capability(t, ids[0], active, issued, time.Hour)); err != nil {
			t.Fatal(err)
		}
		got := map[int]bool{}
		for len(got) < nodes-1 {
			select {
			case s := <-seen:
				if s.node == 0 {
					t.Fatal("OnAdvert called with the node's own advert")
				}
				if s.active == active { // not a late copy of the warm-up
					got[s.node] = true
				}
			case <-ctx.Done():
				t.Fatalf("load %d seen by %d of %d peers within %v", active, len(got), nodes-1, bound)
			}
		}
		return time.Since(start)
	}

	// Warm up as a node does: publish again every interval (here 500ms)
	// until everyone has it. Until a heartbeat grafts the mesh nodes
	// relay nothing, and gossipsub gossips only to peers outside the mesh,
	// so an advert published at start-up can stop at the first hop.
	start := time.Now()
	for ok := false; !ok; {
		if time.Since(start) > bound {
			t.Fatalf("first advert not seen by all within %v", bound)
		}
		issued = issued.Add(time.Second)
		if err := gs[0].Publish(context.Background(), capability(t, ids[0], 1, issued, time.Hour)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		ok = true
		for _, g := range gs[1:] {
			if a, has := g.Latest(pub); !has || a.Assertion.Capacity.Active != 1 {
				ok = false
			}
		}
	}
	t.Logf("gossip: %d nodes, %d links; first advert seen by all %d peers %v after start-up (published every 500ms)", nodes, links, nodes-1, time.Since(start).Round(time.Millisecond))
	var times []time.Duration
	for c := range changes {
		times = append(times, waitAll(uint32(2+c)))
	}
	slices.Sort(times)
	t.Logf("gossip: load change seen by all %d peers in p50=%v, max=%v over %d changes", nodes-1, percentile(times, 50), times[len(times)-1], changes)

	for i, g := range gs[1:] {
		a, ok := g.Latest(pub)
		if !ok || a.Assertion.Capacity.Active != 1+changes || a.From != pub || a.Assertion.Provider != pub {
			t.Errorf("node %d: Latest = %+v, %v; want load %d", i+1, a.Assertion, ok, 1+changes)
		}
	}
	for i, c := range counters {
		// A copy fetched late by IHAVE/IWANT gossip can be older than one
		// that came through the mesh: stale, and rightly dropped. Nothing
		// else from honest nodes may be.
		if keys := slices.DeleteFunc(c.Keys(), func(k string) bool { return k == "gossip/"+AdvertStale }); len(keys) > 0 {
			t.Errorf("node %d dropped adverts from honest nodes: %v", i, c.Snapshot())
		}
	}
}

// rawPublisher joins the topic of "llm" with plain gossipsub, without kith's
// validation, so it can publish anything.
func rawPublisher(tb testing.TB, h host.Host) *pubsub.Topic {
	tb.Helper()
	topic, _ := rawSubscriber(tb, h)
	return topic
}

// rawSubscriber is rawPublisher that also returns its subscription.
func rawSubscriber(tb testing.TB, h host.Host) (*pubsub.Topic, *pubsub.Subscription) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithFloodPublish(true))
	if err != nil {
		tb.Fatal(err)
	}
	topic, err := ps.Join(ProfileTopic("llm"))
	if err != nil {
		tb.Fatal(err)
	}
	sub, err := topic.Subscribe()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sub.Cancel(); _ = topic.Close(); cancel() })
	return topic, sub
}

// waitTopicPeer waits until topic's node knows that p subscribes.
func waitTopicPeer(tb testing.TB, topic *pubsub.Topic, p peer.ID) {
	tb.Helper()
	labtest.WaitFor(tb, 10*time.Second, "subscription from "+p.String(), func() bool { return slices.Contains(topic.ListPeers(), p) })
}

// TestGossipDropsBadAdverts: a peer publishes forged, mismatched, expired,
// oversized and garbage adverts, a denied peer publishes a good one through
// a peer that allows it, and a good node publishes a stale one. The
// receiver drops each under its reason, never hands one to OnAdvert, and
// still takes the good node's adverts.
func TestGossipDropsBadAdverts(t *testing.T) {
	checkNoLeaks(t)
	mn, hosts, ids := mockKithHosts(t, 5)
	recv, good, bad, denied, fwd := hosts[0], hosts[1], hosts[2], hosts[3], hosts[4]
	goodID, badID, deniedID := ids[1], ids[2], ids[3]
	connect(t, mn, bad, recv)
	connect(t, mn, good, recv)
	connect(t, mn, fwd, recv)
	connect(t, mn, denied, fwd) // the denied peer reaches recv only through fwd

	counters := &Counters{}
	delivered := make(chan Advert, 16)
	var fwdSaw atomic.Bool
	startGossip(t, recv, GossipConfig{
		Counters: counters,
		Allowed:  func(p peer.ID) bool { return p != denied.ID() },
		OnAdvert: func(a Advert) { delivered <- a },
	})
	gg := startGossip(t, good, GossipConfig{})
	startGossip(t, fwd, GossipConfig{OnAdvert: func(a Advert) {
		if a.From == denied.ID() {
			fwdSaw.Store(true)
		}
	}})
	badTopic := rawPublisher(t, bad)
	deniedTopic := rawPublisher(t, denied)
	waitTopicPeer(t, badTopic, recv.ID())
	waitTopicPeer(t, deniedTopic, fwd.ID())

	now := time.Now().Truncate(time.Millisecond) // the wire carries milliseconds
	other, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	// Forged: an assertion about bad, signed by another key.
	aboutBad, err := protocol.EncodeCapabilityAssertion(protocol.CapabilityAssertion{
		Provider: bad.ID(), Versions: protocol.Supported, IssuedAt: now, ExpiresAt: now.Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	forged := other.SignAssertion(crypto.DomainCapabilityAssertion, aboutBad)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		reason string
		data   []byte
	}{
		{AdvertForged, advertBytes(t, forged)},
		{AdvertMismatched, advertBytes(t, capability(t, other, 0, now, time.Hour))}, // someone else's
		{AdvertExpired, advertBytes(t, capability(t, badID, 0, now.Add(-2*time.Hour), time.Hour))},
		{AdvertOversized, bytes.Repeat([]byte{0x0a}, protocol.MaxAdvertSize+1)},
		{AdvertMalformed, []byte("not an advert")},
	} {
		if err := badTopic.Publish(ctx, c.data); err != nil {
			t.Fatalf("%s: %v", c.reason, err)
		}
		labtest.WaitFor(t, 10*time.Second, fmt.Sprintf("gossip/%s drop (counters: %v)", c.reason, counters.Snapshot()), func() bool { return counters.Get("gossip/"+c.reason) > 0 })
	}
	// Denied: a good advert, from a peer recv denies. fwd relays it to recv
	// only once a heartbeat has put recv in fwd's mesh (or by IHAVE gossip),
	// which on a loaded machine can take several heartbeats: publish again
	// until recv has seen one.
	deniedAdvert := advertBytes(t, capability(t, deniedID, 0, now, time.Hour))
	labtest.WaitFor(t, 30*time.Second, "gossip/denied drop", func() bool {
		if counters.Get("gossip/denied") > 0 {
			return true
		}
		if err := deniedTopic.Publish(ctx, deniedAdvert); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		return counters.Get("gossip/denied") > 0
	})
	if !fwdSaw.Load() {
		t.Error("the forwarding node, which allows the denied peer, did not take its advert")
	}

	// Stale: the good node's older advert after a newer one.
	newer, older, newest := now.Add(time.Second), now, now.Add(2*time.Second)
	for _, at := range []time.Time{newer, older, newest} {
		if err := gg.Publish(ctx, capability(t, goodID, 1, at, time.Hour)); err != nil {
			t.Fatal(err)
		}
		if at.Equal(older) {
			labtest.WaitFor(t, 10*time.Second, "gossip/stale drop", func() bool { return counters.Get("gossip/stale") > 0 })
		} else {
			select {
			case a := <-delivered:
				if a.From != good.ID() || !a.Assertion.IssuedAt.Equal(at) {
					t.Fatalf("delivered %s's advert issued %v, want the good node's issued %v", a.From, a.Assertion.IssuedAt, at)
				}
			case <-ctx.Done():
				t.Fatal("the good node's advert never arrived")
			}
		}
	}
	if n := len(delivered); n > 0 {
		t.Errorf("%d more adverts delivered: %+v", n, <-delivered)
	}
	want := map[string]uint64{}
	for _, r := range []string{AdvertForged, AdvertMismatched, AdvertExpired, AdvertOversized, AdvertMalformed, AdvertDenied, AdvertStale} {
		want["gossip/"+r] = 1
	}
	if got := counters.Snapshot(); !mapsEqual(got, want) {
		t.Errorf("drop counters %v, want %v", got, want)
	}
}

func mapsEqual(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestGossipDoesNotSendToDenied: a node's adverts reach an allowed peer
// but not a denied one connected just the same, and what the denied peer
// publishes is dropped and counted.
func TestGossipDoesNotSendToDenied(t *testing.T) {
	checkNoLeaks(t)
	mn, hosts, ids := mockKithHosts(t, 3)
	self, allowed, denied := hosts[0], hosts[1], hosts[2]
	connect(t, mn, allowed, self)
	connect(t, mn, denied, self)
	counters := &Counters{}
	g := startGossip(t, self, GossipConfig{Counters: counters, Allowed: func(p peer.ID) bool { return p != denied.ID() }})
	allowedTopic, allowedSub := rawSubscriber(t, allowed)
	deniedTopic, deniedSub := rawSubscriber(t, denied)
	// Both know that self subscribes: self's announcement reaches them.
	waitTopicPeer(t, allowedTopic, self.ID())
	waitTopicPeer(t, deniedTopic, self.ID())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().Truncate(time.Millisecond)
	// The mesh is empty until a heartbeat grafts it, and self publishes to
	// its mesh alone: publish again (as Run does) until the allowed peer
	// has one.
	for issued := now; ; issued = issued.Add(time.Second) {
		if err := g.Publish(ctx, capability(t, ids[0], 1, issued, time.Hour)); err != nil {
			t.Fatal(err)
		}
		wait, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
		m, err := allowedSub.Next(wait)
		wcancel()
		if err == nil && m.GetFrom() == self.ID() {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("allowed peer: %v, %v", m, err)
		}
	}
	// Within the time the allowed peer took, and a good while more, the
	// denied one gets nothing.
	wait, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	if m, err := deniedSub.Next(wait); err == nil {
		t.Fatalf("denied peer received %s's message", m.GetFrom())
	}

	if err := deniedTopic.Publish(ctx, advertBytes(t, capability(t, ids[2], 1, now, time.Hour))); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "gossip/denied drop", func() bool { return counters.Get("gossip/denied") == 1 })
	if _, ok := g.Latest(denied.ID()); ok {
		t.Error("the denied peer's advert was recorded")
	}
}

// TestGossipValidate runs the topic validator directly on messages pubsub
// would hand it, including the cases a live network makes awkward to
// stage: an allowed author forwarded by a denied peer, our own advert
// relayed back.
func TestGossipValidate(t *testing.T) {
	_, hosts, ids := mockKithHosts(t, 3)
	self, author, denied := hosts[0], ids[1], hosts[2].ID()
	now := time.Now()
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	counters := &Counters{}
	g := startGossip(t, self, GossipConfig{
		Counters: counters,
		Allowed:  func(p peer.ID) bool { return p != denied },
		Now:      func() time.Time { return *clock.Load() },
	})
	onTopic := func(topic string, from, author peer.ID, data []byte) *pubsub.Message {
		return &pubsub.Message{Message: &pb.Message{From: []byte(author), Data: data, Topic: &topic}, ReceivedFrom: from}
	}
	msg := func(from, author peer.ID, data []byte) *pubsub.Message {
		return onTopic(ProfileTopic("llm"), from, author, data)
	}
	good := advertBytes(t, capability(t, author, 2, now, time.Minute))
	for _, c := range []struct {
		name   string
		msg    *pubsub.Message
		want   pubsub.ValidationResult
		reason string
	}{
		{"good", msg(author.PeerID(), author.PeerID(), good), pubsub.ValidationAccept, ""},
		{"denied forwarder", msg(denied, author.PeerID(), good), pubsub.ValidationIgnore, AdvertDenied},
		{"denied author", msg(author.PeerID(), denied, good), pubsub.ValidationIgnore, AdvertDenied},
		{"own, relayed back", msg(author.PeerID(), self.ID(), good), pubsub.ValidationIgnore, ""},
		{"empty", msg(author.PeerID(), author.PeerID(), nil), pubsub.ValidationReject, AdvertMalformed},
		{"no author", msg(author.PeerID(), "", good), pubsub.ValidationReject, AdvertMalformed},
		{"another profile's topic", onTopic(ProfileTopic("other"), author.PeerID(), author.PeerID(), good), pubsub.ValidationReject, AdvertOffTopic},
		{"legacy topic", onTopic(Topic, author.PeerID(), author.PeerID(), good), pubsub.ValidationAccept, ""},
	} {
		before := counters.Get("gossip/" + c.reason)
		if got := g.validate(context.Background(), c.msg.ReceivedFrom, c.msg); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if c.reason != "" && counters.Get("gossip/"+c.reason) != before+1 {
			t.Errorf("%s: gossip/%s not counted: %v", c.name, c.reason, counters.Snapshot())
		}
		if c.want == pubsub.ValidationAccept {
			if a, ok := c.msg.ValidatorData.(Advert); !ok || a.From != author.PeerID() || a.Assertion.Capacity.Active != 2 {
				t.Errorf("%s: validator data %+v", c.name, c.msg.ValidatorData)
			}
		}
	}

	// Latest and expiry, through accept as the receive loop calls it.
	adv, err := verifyAdvert(author.PeerID(), good, now)
	if err != nil {
		t.Fatal(err)
	}
	g.accept(adv, author.PeerID())
	if a, ok := g.Latest(author.PeerID()); !ok || a.Assertion.Capacity.Active != 2 {
		t.Errorf("Latest = %+v, %v", a, ok)
	}
	if all := g.Adverts(); len(all) != 1 || all[0].From != author.PeerID() {
		t.Errorf("Adverts = %+v", all)
	}
	older := advertBytes(t, capability(t, author, 3, now.Add(-time.Second), time.Minute))
	if got := g.validate(context.Background(), author.PeerID(), msg(author.PeerID(), author.PeerID(), older)); got != pubsub.ValidationIgnore {
		t.Errorf("older advert: %v, want ignore", got)
	}
	// A newer advert less than MinGap (1 s) after the last is dropped; the
	// same advert again (on another topic) and one a second later pass.
	for _, c := range []struct {
		after  time.Duration
		want   pubsub.ValidationResult
		reason string
	}{
		{500 * time.Millisecond, pubsub.ValidationIgnore, AdvertTooSoon},
		{0, pubsub.ValidationAccept, ""},
		{time.Second, pubsub.ValidationAccept, ""},
	} {
		before := counters.Get("gossip/" + AdvertTooSoon)
		m := msg(author.PeerID(), author.PeerID(), advertBytes(t, capability(t, author, 3, now.Add(c.after), time.Minute)))
		if got := g.validate(context.Background(), author.PeerID(), m); got != c.want {
			t.Errorf("advert %v after the last: %v, want %v", c.after, got, c.want)
		}
		if c.reason != "" && counters.Get("gossip/"+c.reason) != before+1 {
			t.Errorf("advert %v after the last: gossip/%s not counted", c.after, c.reason)
		}
	}
	later := now.Add(2 * time.Minute)
	clock.Store(&later)
	if _, ok := g.Latest(author.PeerID()); ok {
		t.Error("Latest returns an expired advert")
	}
	if all := g.Adverts(); len(all) != 0 {
		t.Errorf("Adverts returns expired ones: %+v", all)
	}
}

// TestGossipPublishRefusesBadAdverts: Publish checks the node's own advert
// the way its peers will, and says why it refuses one.
func TestGossipPublishRefusesBadAdverts(t *testing.T) {
	_, hosts, ids := mockKithHosts(t, 1)
	g := startGossip(t, hosts[0], GossipConfig{})
	other, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		a      crypto.Assertion
		reason string
		is     error
	}{
		{"someone else's", capability(t, other, 0, now, time.Hour), AdvertMismatched, protocol.ErrPeerMismatch},
		{"expired", capability(t, ids[0], 0, now.Add(-2*time.Hour), time.Hour), AdvertExpired, protocol.ErrExpired},
		{"empty", crypto.Assertion{}, AdvertMalformed, protocol.ErrMalformed},
	} {
		err := g.Publish(ctx, c.a)
		if AdvertReason(err) != c.reason || !errors.Is(err, ErrBadAdvert) || !errors.Is(err, c.is) {
			t.Errorf("%s: %v; want reason %s, ErrBadAdvert and %v", c.name, err, c.reason, c.is)
		}
	}
	if err := g.Publish(ctx, capability(t, ids[0], 0, now, time.Hour)); err != nil {
		t.Errorf("a good advert: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Publish(ctx, capability(t, ids[0], 0, now, time.Hour)); err == nil {
		t.Error("Publish after Close succeeded")
	}
}

// TestGossipPrune: the advert table forgets expired adverts once it grows.
func TestGossipPrune(t *testing.T) {
	_, hosts, _ := mockKithHosts(t, 1)
	now := time.Now()
	g := startGossip(t, hosts[0], GossipConfig{Now: func() time.Time { return now.Add(90 * time.Second) }})
	for i := range minPruneAt + 1 {
		id, err := crypto.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		p := id.PeerID()
		// Every other advert expires after a minute, before the clock.
		ttl := time.Duration(i%2+1) * time.Minute
		g.accept(Advert{From: p, Assertion: protocol.CapabilityAssertion{Provider: p, IssuedAt: now, ExpiresAt: now.Add(ttl)}, Received: now}, p)
	}
	g.mu.Lock()
	n := len(g.latest)
	g.mu.Unlock()
	if want := (minPruneAt + 1) / 2; n != want {
		t.Errorf("after pruning, %d adverts kept, want the %d unexpired", n, want)
	}
}

// TestGossipHearsOnlyItsProfiles: a node hears the adverts of the
// providers of the profiles it serves or requests, and no other, though
// every node is connected to every other.
func TestGossipHearsOnlyItsProfiles(t *testing.T) {
	checkNoLeaks(t)
	mn, hosts, ids := mockKithHosts(t, 4)
	for i := range hosts {
		for j := range i {
			connect(t, mn, hosts[i], hosts[j])
		}
	}
	provider, requester, other, both := 0, 1, 2, 3
	gs := make([]*Gossip, len(hosts))
	for i, h := range hosts {
		g, err := NewGossip(context.Background(), h, GossipConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		gs[i] = g
	}
	mustNil := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustNil(gs[provider].Serve([]string{"llm"}))
	mustNil(gs[requester].Want("llm"))
	mustNil(gs[other].Serve([]string{"other"}))
	mustNil(gs[both].Serve([]string{"other"}))
	mustNil(gs[both].Want("llm"))
	if got, want := gs[requester].Topics(), []string{ProfileTopic("llm")}; !slices.Equal(got, want) {
		t.Errorf("requester's topics %v, want %v", got, want)
	}

	issued := time.Now().Truncate(time.Millisecond)
	labtest.WaitFor(t, 30*time.Second, "the advert at the requesters", func() bool {
		issued = issued.Add(time.Second)
		if err := gs[provider].Publish(context.Background(), capability(t, ids[provider], 1, issued, time.Hour)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		_, a := gs[requester].Latest(hosts[provider].ID())
		_, b := gs[both].Latest(hosts[provider].ID())
		return a && b
	})
	if _, ok := gs[other].Latest(hosts[provider].ID()); ok {
		t.Error("a node that neither serves nor requests llm heard its provider")
	}
	if slices.Contains(gs[other].Topics(), ProfileTopic("llm")) {
		t.Error("a node that neither serves nor requests llm is on its topic")
	}
	// Serving nothing and wanting nothing any more leaves the topic.
	mustNil(gs[provider].Serve(nil))
	if got := gs[provider].Topics(); len(got) != 0 {
		t.Errorf("after Serve(nil), topics %v", got)
	}
}

// TestMeaningful: which load changes are worth an advert before the next
// refresh.
func TestMeaningful(t *testing.T) {
	c := func(active, free uint32) protocol.Capacity { return protocol.Capacity{Active: active, FreeSlots: free} }
	for _, tc := range []struct {
		was, now protocol.Capacity
		want     bool
	}{
		{c(3, 1), c(4, 0), true},      // became full
		{c(4, 0), c(3, 1), true},      // free again
		{c(1, 3), c(2, 2), true},      // a quarter of 4 slots
		{c(2, 2), c(2, 2), false},     // nothing
		{c(10, 30), c(11, 29), false}, // one slot of 40
		{c(10, 30), c(20, 20), true},  // ten of 40
	} {
		if got := Meaningful(tc.was, tc.now); got != tc.want {
			t.Errorf("Meaningful(%+v, %+v) = %v, want %v", tc.was, tc.now, got, tc.want)
		}
	}
}

// TestGossipPushing: on a topic, a provider pushes while fewer than max
// live providers rank ahead of it; expired adverts do not count.
func TestGossipPushing(t *testing.T) {
	_, hosts, _ := mockKithHosts(t, 1)
	now := time.Now()
	g := startGossip(t, hosts[0], GossipConfig{Now: func() time.Time { return now }})
	topic := ProfileTopic("llm")
	self := pushRank(hosts[0].ID(), topic)
	var ahead, behind []peer.ID
	for len(ahead) < 3 || len(behind) < 3 {
		id, err := crypto.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Compare(pushRank(id.PeerID(), topic), self) < 0 {
			ahead = append(ahead, id.PeerID())
		} else {
			behind = append(behind, id.PeerID())
		}
	}
	g.mu.Lock()
	g.authors[topic] = map[peer.ID]time.Time{}
	for _, p := range behind {
		g.authors[topic][p] = now.Add(time.Minute)
	}
	for _, p := range ahead[:2] {
		g.authors[topic][p] = now.Add(time.Minute)
	}
	g.authors[topic][ahead[2]] = now.Add(-time.Second) // expired
	g.mu.Unlock()
	if !g.pushing(topic, 3) {
		t.Error("not pushing with 2 live providers ahead and a limit of 3")
	}
	if g.pushing(topic, 2) {
		t.Error("pushing with 2 live providers ahead and a limit of 2")
	}
	if !g.pushing(topic, -1) || !g.pushing(Topic, 1) {
		t.Error("no limit, or the legacy topic, must always push")
	}
}

// TestSubscriptionFilter: only advert topics, only allowed peers, and no
// more than maxPeerTopics per peer are recorded.
func TestSubscriptionFilter(t *testing.T) {
	_, hosts, _ := mockKithHosts(t, 2)
	denied := hosts[1].ID()
	f := newSubscriptionFilter(hosts[0], func(p peer.ID) bool { return p != denied })
	defer f.stop()
	sub := func(topic string, on bool) *pb.RPC_SubOpts { return &pb.RPC_SubOpts{Topicid: &topic, Subscribe: &on} }
	var subs []*pb.RPC_SubOpts
	for i := range maxPeerTopics + 5 {
		subs = append(subs, sub(ProfileTopic(fmt.Sprint(i)), true))
	}
	subs = append(subs, sub("/other/topic", true), sub(TopicPrefix+"not-hex", true))
	from := peer.ID("someone")
	got, err := f.FilterIncomingSubscriptions(from, subs)
	if err != nil || len(got) != maxPeerTopics {
		t.Fatalf("%d subscriptions kept (err %v), want %d", len(got), err, maxPeerTopics)
	}
	// Unsubscribing makes room again, also in the same RPC. (Which topics
	// were kept depends on gossipsub's map order: leave one of those.)
	got, _ = f.FilterIncomingSubscriptions(from, []*pb.RPC_SubOpts{sub(ProfileTopic("new"), true), sub(got[0].GetTopicid(), false)})
	if len(got) != 2 {
		t.Errorf("after an unsubscription, %d of 2 kept", len(got))
	}
	if got, _ := f.FilterIncomingSubscriptions(denied, subs[:1]); len(got) != 0 {
		t.Error("a denied peer's subscription was kept")
	}
	for topic, want := range map[string]bool{Topic: true, ProfileTopic("x"): true, TopicPrefix: false, Topic + "/" + strings.Repeat("A", 32): false, "/kith/capabilities/2": false} {
		if f.CanSubscribe(topic) != want {
			t.Errorf("CanSubscribe(%q) = %v", topic, !want)
		}
	}
}
