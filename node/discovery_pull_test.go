package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/discovery"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
)

// Past advert_push_max providers of a profile the others push nothing on
// its topic, and a requester that knows no provider with a free slot pulls
// a few from the DHT at request time (docs/scale.md). Two providers, a push
// limit of one: the one that pushes is full, the other is silent and free.
// The requester, which has never heard of the silent one, finds it through
// the DHT, learns its free slot by asking it, and delegates to it.
func TestRequesterPullsProviderPastPushLimit(t *testing.T) {
	const profile = "pulled"
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	// hold takes a provider's one slot until the test ends: the pool is
	// shared by every profile, so the provider is full for profile too.
	hold := func(ctx context.Context, _ executor.Task, _ func(executor.Update)) (executor.Result, error) {
		select {
		case <-release:
			return executor.Result{Text: "held"}, nil
		case <-ctx.Done():
			return executor.Result{}, ctx.Err()
		}
	}
	provider := func(c *config.Config) {
		// profile alone: an advert that also listed echo, which the
		// requester serves, would reach it on echo's topic.
		c.Profiles = []config.Profile{{Name: profile, Executor: config.ExecutorEcho}}
		c.Discovery.DHT = config.DHTServer
		c.Discovery.AdvertInterval = config.Duration(time.Second)
		c.Discovery.LoadInterval = config.Duration(time.Second)
		c.Discovery.AdvertPushMax = 1
		c.Limits.MaxRemoteConcurrent = 1
	}
	withHold := Options{Handlers: map[string]executor.HandlerFunc{"hold": hold}}
	provs := []*Node{startWithOptions(t, provider, withHold), startWithOptions(t, provider, withHold)}
	if err := connect(provs[1], provs[0]); err != nil {
		t.Fatal(err)
	}
	// Every node ranks a topic's providers alike (discovery's pushing):
	// by SHA-256(peer ID ‖ topic), lowest first.
	rank := func(p peer.ID) []byte {
		sum := sha256.Sum256([]byte(string(p) + discovery.ProfileTopic(profile)))
		return sum[:]
	}
	full, silent := provs[0], provs[1]
	if bytes.Compare(rank(silent.PeerID()), rank(full.PeerID())) < 0 {
		full, silent = silent, full
	}
	labtest.WaitFor(t, 30*time.Second, "the silent provider has heard the pusher's advert, so it pushes no more", func() bool {
		return silent.discoverer().gossip.ProvidersOn(profile) >= 1
	})

	// The requester asks the DHT, never serves it, and is connected to the
	// full provider only, which lets it use hold.
	req := startWith(t, func(c *config.Config) { c.Discovery.DHT = config.DHTClient })
	change(t, full, req.PeerID(), api.PeerChange{Trust: new(api.Verified)})
	if err := connect(req, full); err != nil {
		t.Fatal(err)
	}
	d := req.discoverer()
	labtest.WaitFor(t, 30*time.Second, "the requester's DHT finds the silent provider's record", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hints, _ := d.dht.FindProviders(ctx, profile, 8)
		return slices.ContainsFunc(hints, func(h discovery.Hint) bool { return h.ID == silent.PeerID() })
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Fill the pusher's one slot, and let the requester know it is full.
	if _, err := req.Engine().Delegate(ctx, delegation.Request{Profile: "hold", Peer: full.PeerID(), BudgetTokens: 16,
		Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("hold")}}}); err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 30*time.Second, "the pusher is full", func() bool { return full.Engine().Capacity().FreeSlots == 0 })
	if a, err := req.Engine().QueryCapabilities(ctx, full.PeerID()); err != nil || a.Capacity.FreeSlots != 0 {
		t.Fatalf("the requester's view of the pusher: %+v, %v; want full", a, err)
	}
	if _, ok := req.Engine().KnownCapabilities()[silent.PeerID()]; ok {
		t.Fatal("the requester knows the silent provider before it asks: nothing left to pull")
	}

	// No known provider has a free slot: the search pulls from the DHT.
	found, _ := d.providers(ctx, profile)
	if !slices.Contains(found, silent.PeerID()) {
		t.Fatalf("providers found %v; want the silent provider %s, pulled from the DHT", found, silent.PeerID())
	}
	k, ok := req.Engine().KnownCapabilities()[silent.PeerID()]
	if !ok || k.Assertion.Capacity.FreeSlots == 0 {
		t.Fatalf("the requester's view of the silent provider after the pull: %+v (known %v); want its free slot", k, ok)
	}

	// A request that names no peer goes to the provider with a free slot,
	// which the requester learned of by the pull.
	id, err := req.Engine().Delegate(ctx, delegation.Request{Profile: profile, BudgetTokens: 16,
		Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := req.Engine().Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != protocol.StateCompleted || got.Peer != silent.PeerID() {
		t.Fatalf("delegation %s on %s, want completed on the silent provider %s", got.State, got.Peer, silent.PeerID())
	}
}
