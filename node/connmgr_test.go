package node

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	basicconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// The connection manager protects static peers, peers trusted by name and
// relays, and nobody else, with the configured water marks.
func TestConnManagerPolicy(t *testing.T) {
	ids := make([]peer.ID, 5)
	for i := range ids {
		id, err := crypto.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id.PeerID()
	}
	static, trusted, dhtOnly, deniedStatic, relay := ids[0], ids[1], ids[2], ids[3], ids[4]
	cfg := config.Default()
	cfg.Discovery.ConnsLow, cfg.Discovery.ConnsHigh = 10, 20
	cfg.NAT.Relays = []string{"/ip4/127.0.0.1/tcp/4001/p2p/" + relay.String()}
	cm, err := connManager(cfg, []store.Peer{
		{ID: static, Sources: []string{"static"}},
		{ID: trusted, Trust: protocol.Trusted, Sources: []string{"mdns"}},
		{ID: dhtOnly, Sources: []string{"dht"}},
		{ID: deniedStatic, Sources: []string{"static"}, Access: store.AccessDeny},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	for _, c := range []struct {
		p    peer.ID
		tag  string
		want bool
	}{
		{static, protectStatic, true},
		{trusted, protectStatic, true},
		{relay, protectRelay, true},
		{dhtOnly, "", false},
		{deniedStatic, "", false},
	} {
		if got := cm.IsProtected(c.p, c.tag); got != c.want {
			t.Errorf("%s protected (%q): %v, want %v", c.p, c.tag, got, c.want)
		}
	}
	if info := cm.GetInfo(); info.LowWater != 10 || info.HighWater != 20 || info.GracePeriod != connGrace {
		t.Errorf("water marks %d/%d grace %v, want 10/20 %v", info.LowWater, info.HighWater, info.GracePeriod, connGrace)
	}
}

// A running node's host uses the policy, and a peer it delegates to is
// tagged above what the DHT and gossipsub give, so DHT-only peers are
// trimmed first.
func TestConnManagerTagsDelegationPeers(t *testing.T) {
	a := startWith(t, func(c *config.Config) { c.Discovery.ConnsLow, c.Discovery.ConnsHigh = 3, 7 })
	b := startWith(t, nil)
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	cm, ok := a.Host().ConnManager().(*basicconnmgr.BasicConnMgr)
	if !ok {
		t.Fatalf("the host's connection manager is %T", a.Host().ConnManager())
	}
	if info := cm.GetInfo(); info.LowWater != 3 || info.HighWater != 7 {
		t.Errorf("water marks %d/%d, want 3/7", info.LowWater, info.HighWater)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := a.Engine().Delegate(ctx, delegation.Request{Profile: "echo", Peer: b.PeerID(), BudgetTokens: 16,
		Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("hi")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Engine().Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	if ti := cm.GetTagInfo(b.PeerID()); ti == nil || ti.Tags[tagDelegate] != tagDelegateWeight {
		t.Errorf("delegation peer's tags %+v, want %s=%d", ti, tagDelegate, tagDelegateWeight)
	}
}
