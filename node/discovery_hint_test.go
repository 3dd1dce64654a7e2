package node

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/discovery"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/store"
)

func quietDiscovery(c *config.Config) {
	c.Discovery.DHT = config.DHTOff
	c.Discovery.Gossip = false
}

// A DNS-SD (or mDNS) record that names some other node's peer ID at a
// real node's address leaves nothing behind: the dial fails the handshake
// and is counted as wrong_peer, the store, which the node redials after
// every restart, never holds the phantom, and the same record heard again
// is not dialled again. A record naming the right ID is stored once
// connected.
func TestHintNamingAnotherPeerLeavesNothing(t *testing.T) {
	a, b := startWith(t, quietDiscovery), startWith(t, quietDiscovery)
	other, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	d := a.discoverer()
	d.hint(context.Background(), discovery.Hint{ID: other.PeerID(), Addrs: b.Host().Addrs(), Source: discovery.SourceDNSSD})
	labtest.WaitFor(t, 10*time.Second, "the phantom's dial failed", func() bool { return d.counters.Get("dnssd/wrong_peer") == 1 })
	d.hint(context.Background(), discovery.Hint{ID: other.PeerID(), Addrs: b.Host().Addrs(), Source: discovery.SourceDNSSD})
	d.wg.Wait()
	if stored(t, a, other.PeerID()) {
		t.Fatal("the store holds a peer that a DNS record merely named")
	}
	if got := d.counters.Snapshot(); len(got) != 1 || got["dnssd/wrong_peer"] != 1 {
		t.Fatalf("counters %v after the same phantom record twice: want one dnssd/wrong_peer, no second dial", got)
	}

	d.hint(context.Background(), discovery.Hint{ID: b.PeerID(), Addrs: b.Host().Addrs(), Source: discovery.SourceDNSSD})
	labtest.WaitFor(t, 10*time.Second, "b stored as a DNS-SD find", func() bool { return stored(t, a, b.PeerID()) })
	if got := d.sourcesOf(b.PeerID(), nil); !slices.Contains(got, "dnssd") {
		t.Fatalf("b's sources %v, want dnssd among them", got)
	}
}

func stored(t *testing.T, n *Node, p peer.ID) bool {
	t.Helper()
	peers, err := n.Store().ListPeers()
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(peers, func(x store.Peer) bool { return x.ID == p })
}

// Sources from earlier runs are shown only while that source is on, and a
// peer no source named is shown by how it arrived.
func TestSourcesShownOnlyWhileOn(t *testing.T) {
	a, b := startWith(t, quietDiscovery), startWith(t, quietDiscovery)
	d := a.discoverer()
	if got := d.sourcesOf(b.PeerID(), []string{"mdns", "static", "dht", "gossip", "dnssd"}); !slices.Equal(got, []string{"static"}) {
		t.Fatalf("with mDNS, DNS-SD, the DHT and gossip off, sources %v, want [static]", got)
	}
	if err := connect(b, a); err != nil {
		t.Fatal(err)
	}
	if got := d.sourcesOf(b.PeerID(), nil); !slices.Equal(got, []string{"inbound"}) {
		t.Fatalf("a peer that dialed in unasked: sources %v, want [inbound]", got)
	}
}

// With the DHT off, a provider known only by a signed advert (no address)
// is listed apart, with the reason, and a stream to it fails saying so.
func TestProviderWithoutAddressSaysWhy(t *testing.T) {
	a := startWith(t, quietDiscovery)
	d := a.discoverer()
	other, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.reach(context.Background(), other.PeerID()); err != errNoAddrs {
		t.Fatalf("reach a peer with no address and the DHT off: %v, want errNoAddrs", err)
	}
	_, err = hostDialer{a.Host(), &finder{disc: d}}.OpenStream(context.Background(), other.PeerID())
	if err == nil || !strings.Contains(err.Error(), errNoAddrs.Error()) {
		t.Fatalf("a stream to it: %v, want the reason", err)
	}
}

// kith status explains an unknown NAT type with what peers observed.
func TestNATNote(t *testing.T) {
	listen := []ma.Multiaddr{ma.StringCast("/ip4/0.0.0.0/tcp/4001"), ma.StringCast("/ip4/0.0.0.0/udp/4001/quic-v1")}
	s := natSnapshot{observed: map[string]int{"/ip4/11.0.0.1/udp/4001/quic-v1": 1}}
	note := natNote(s, listen)
	for _, want := range []string{"tcp: no peer has reported", "udp: /ip4/11.0.0.1/udp/4001/quic-v1 (1 observation), the listening port kept", "needs 9 observations"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	s.observed = map[string]int{"/ip4/11.0.0.1/tcp/61234": 2}
	if note := natNote(s, listen); !strings.Contains(note, "the port changed") {
		t.Errorf("note %q should say the NAT changed the port", note)
	}
	s.natTCP, s.natUDP = network.NATDeviceTypeEndpointIndependent, network.NATDeviceTypeEndpointDependent
	if note := natNote(s, listen); note != "" {
		t.Errorf("both NAT types known, note %q", note)
	}
	if got := oneLine("failed to dial: all dials failed\n  * [/ip4/1.2.3.4/tcp/1] refused\n  * [/ip4/1.2.3.4/udp/1/quic-v1] timeout"); strings.Contains(got, "\n") {
		t.Errorf("oneLine left a newline: %q", got)
	}
}

// A relay in allowlist mode logs the peers it refuses, at info and naming
// them, at most refusalBurst lines at once and then one per refusalEvery;
// the next line counts what was not logged. In a synctest bubble the rate
// limiter's clock is fake: the counts are exact, and the wait takes no time.
func TestRelayRefusalsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		acl := relayACL{newGater(config.PolicyAllowlist, nil), newRefusalLog(slog.New(slog.NewTextHandler(&buf, nil)))}
		stranger, err := crypto.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		refuse := func(n int) {
			for range n {
				if acl.AllowReserve(stranger.PeerID(), ma.StringCast("/ip4/11.0.0.1/tcp/4001")) {
					t.Fatal("a peer not allowed got a reservation")
				}
			}
		}
		const msg = "refused a peer that is not allowed"
		refuse(3 * refusalBurst)
		if lines := strings.Count(buf.String(), msg); lines != refusalBurst || !strings.Contains(buf.String(), stranger.PeerID().String()) || !strings.Contains(buf.String(), "level=INFO") {
			t.Fatalf("%d refusal lines for %d refusals at once, want %d at info naming the peer:\n%s", lines, 3*refusalBurst, refusalBurst, buf.String())
		}
		time.Sleep(refusalEvery)
		buf.Reset()
		refuse(2)
		if lines := strings.Count(buf.String(), msg); lines != 1 || !strings.Contains(buf.String(), fmt.Sprintf("not_logged_since_last=%d", 2*refusalBurst)) {
			t.Fatalf("after %v: %d lines, want one counting the %d refusals not logged:\n%s", refusalEvery, lines, 2*refusalBurst, buf.String())
		}
	})
}
