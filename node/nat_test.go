package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/store"
)

// plainHost is a libp2p host with the relay transport (go-libp2p's
// defaults) on loopback: a peer that asks a kith relay for a reservation.
func plainHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func reserve(h host.Host, relay peer.AddrInfo) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := client.Reserve(ctx, h, relay)
	return err
}

// circuitTo connects to dest through the relay, as a peer that knows dest
// only by its relay address does: the direct addresses an earlier
// connection taught it are forgotten first.
func circuitTo(from host.Host, relay peer.AddrInfo, dest peer.ID) error {
	addr, err := ma.NewMultiaddr(relay.Addrs[0].String() + "/p2p/" + relay.ID.String() + "/p2p-circuit")
	if err != nil {
		return err
	}
	from.Peerstore().ClearAddrs(dest)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := from.Connect(network.WithAllowLimitedConn(ctx, "test"), peer.AddrInfo{ID: dest, Addrs: []ma.Multiaddr{addr}}); err != nil {
		return err
	}
	for _, c := range from.Network().ConnsToPeer(dest) {
		if !isRelayed(c) {
			return fmt.Errorf("connected to %s directly, not through the relay", dest)
		}
	}
	return nil
}

// A relay node in allowlist mode relays for allowed peers only: it grants
// them reservations and carries circuits between them, and refuses a peer
// it does not admit, at the handshake (the gater) and, should the list
// change under a live connection, in the relay protocol itself (the ACL).
func TestRelayAllowlist(t *testing.T) {
	relay := startWith(t, func(c *config.Config) {
		c.NAT.Relay = true
		c.Policy.Mode = config.PolicyAllowlist
	})
	info := peer.AddrInfo{ID: relay.PeerID(), Addrs: relay.Host().Addrs()}
	allowed, friend, stranger := plainHost(t), plainHost(t), plainHost(t)
	change(t, relay, allowed.ID(), api.PeerChange{Access: new(api.AccessAllow)})
	change(t, relay, friend.ID(), api.PeerChange{Access: new(api.AccessAllow)})

	// The relay service starts once the host has taken in its (declared)
	// public reachability: retry until it answers.
	var err error
	labtest.WaitFor(t, 10*time.Second, "the relay grants the allowed peer a reservation", func() bool {
		err = reserve(allowed, info)
		return err == nil
	})

	// It carries a circuit between two allowed peers: a limited
	// connection that a ping crosses.
	if err := circuitTo(friend, info, allowed.ID()); err != nil {
		t.Fatalf("allowed peer could not reach the other through the relay: %v", err)
	}
	conns := friend.Network().ConnsToPeer(allowed.ID())
	if len(conns) != 1 || !conns[0].Stat().Limited || !isRelayed(conns[0]) {
		t.Fatalf("want one limited relayed connection, have %v", conns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res := <-ping.Ping(ctx, friend, allowed.ID()); res.Error != nil {
		t.Fatalf("ping through the relay: %v", res.Error)
	}

	// A peer the list does not admit gets no reservation and no circuit.
	if err := reserve(stranger, info); err == nil {
		t.Fatal("the relay granted a reservation to a peer that is not allowed")
	}
	if err := circuitTo(stranger, info, allowed.ID()); err == nil {
		t.Fatal("the relay carried a circuit for a peer that is not allowed")
	}
	if relay.Host().Network().Connectedness(stranger.ID()) != network.NotConnected {
		t.Fatal("the relay holds a connection from a peer that is not allowed")
	}

	// The relay protocol asks the list again on every request: with the
	// friend's allowance gone from the gater but its connection still up
	// (applyLive would close it; this isolates the relay's own check),
	// the relay refuses it a reservation and a circuit.
	relay.gater.set(friend.ID(), store.AccessNone)
	if relay.Host().Network().Connectedness(friend.ID()) != network.Connected {
		t.Fatal("the friend's connection to the relay is gone; the test needs it up")
	}
	err = reserve(friend, info)
	var re client.ReservationError
	if !errors.As(err, &re) || re.Status != pbv2.Status_PERMISSION_DENIED {
		t.Fatalf("reservation for a peer no longer allowed: %v, want PERMISSION_DENIED", err)
	}
	for _, c := range friend.Network().ConnsToPeer(allowed.ID()) {
		c.Close()
	}
	if err := circuitTo(friend, info, allowed.ID()); err == nil {
		t.Fatal("the relay carried a circuit from a peer no longer allowed")
	}
	// The allowed peer keeps its service.
	if err := reserve(allowed, info); err != nil {
		t.Fatalf("allowed peer refused after the change: %v", err)
	}
}

// A home node with static relays takes a reservation once the boot delay
// has passed with its reachability unknown, and says so in its status
// together with the relay address peers can use.
func TestStaticRelayReservation(t *testing.T) {
	relay := startWith(t, func(c *config.Config) { c.NAT.Relay = true })
	relayAddr := relay.Addrs()[0]
	home := startWith(t, func(c *config.Config) {
		c.NAT.Relays = []string{relayAddr}
		c.NAT.RelayBootDelay = config.Duration(100 * time.Millisecond)
	})
	// A peer that knows the home node only through the relay reaches it:
	// the relay carries circuits only to peers holding a reservation.
	// (On loopback the status lists no relay address: go-libp2p
	// advertises circuits only through relays with public addresses; the
	// namespace test in cmd/kith checks those.)
	info := peer.AddrInfo{ID: relay.PeerID(), Addrs: relay.Host().Addrs()}
	// On loopback the node learns no public address, so its hole
	// punching service never starts and auto-relay starts only after
	// punchReadyWait.
	far := plainHost(t)
	deadline := time.Now().Add(punchReadyWait + 20*time.Second)
	for err := circuitTo(far, info, home.PeerID()); err != nil; err = circuitTo(far, info, home.PeerID()) {
		if time.Now().After(deadline) {
			t.Fatalf("the home node is not reachable through the relay: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	c := api.NewClient(home.SocketPath())
	defer c.Close()
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Reachability != "unknown" || st.RelayService || len(st.Relays) != 1 {
		t.Fatalf("home node status %+v", st)
	}
	paths := map[string]string{}
	for _, p := range st.Peers {
		paths[p.ID] = p.Path
		if p.RTTMillis <= 0 {
			t.Errorf("peer %s: no round-trip time", p.ID)
		}
		if p.ID == relay.PeerID().String() && p.Agent != "kith/"+Version {
			t.Errorf("relay's agent %q", p.Agent)
		}
	}
	if paths[relay.PeerID().String()] != api.PathDirect || paths[far.ID().String()] != api.PathRelayed {
		t.Fatalf("paths %v: want the relay direct and the far peer relayed", paths)
	}
	// The relay, dialed as the node started, told it the address it sees.
	observed := false
	for _, o := range st.ObservedAddrs {
		observed = observed || strings.HasPrefix(o.Addr, "/ip4/127.0.0.1/") && o.Observers >= 1
	}
	if !observed {
		t.Fatalf("observed addresses %+v: want the loopback address the relay sees", st.ObservedAddrs)
	}

	rc := api.NewClient(relay.SocketPath())
	defer rc.Close()
	rs, err := rc.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rs.Reachability != "public" || !rs.RelayService || rs.RelayPolicy != config.PolicyOpen.String() {
		t.Fatalf("relay status %+v", rs)
	}
}
