package node

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
)

// startWith starts a node on loopback with cfg adjusted by edit.
func startWith(t *testing.T, edit func(*config.Config)) *Node {
	t.Helper()
	return startWithOptions(t, edit, Options{})
}

// startWithOptions is startWith with node options (in-process handlers).
func startWithOptions(t *testing.T, edit func(*config.Config), opts Options) *Node {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	if _, err := Init(home, []string{"/ip4/127.0.0.1/tcp/0"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(home)
	if err != nil {
		t.Fatal(err)
	}
	offHostNetwork(&cfg)
	if edit != nil {
		edit(&cfg)
	}
	n, err := New(home, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-n.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	return n
}

func connect(from, to *Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return from.Host().Connect(ctx, peer.AddrInfo{ID: to.PeerID(), Addrs: to.Host().Addrs()})
}

func change(t *testing.T, n *Node, id peer.ID, ch api.PeerChange) {
	t.Helper()
	c := api.NewClient(n.SocketPath())
	defer c.Close()
	if err := c.ChangePeer(context.Background(), id.String(), ch); err != nil {
		t.Fatal(err)
	}
}

func connected(a, b *Node) bool {
	return a.Host().Network().Connectedness(b.PeerID()) == network.Connected
}

func TestDenyClosesAndRefuses(t *testing.T) {
	a, b := startWith(t, nil), startWith(t, nil)
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	change(t, b, a.PeerID(), api.PeerChange{Access: new(api.AccessDeny)})
	// The live connection is closed at once, on both ends.
	labtest.WaitFor(t, 10*time.Second, "the denied peer's connection is closed", func() bool { return !connected(a, b) && !connected(b, a) })
	// And it cannot come back: not by accept, not by dial.
	if err := connect(a, b); err == nil {
		labtest.WaitFor(t, 10*time.Second, "B drops A's new connection", func() bool { return !connected(a, b) })
	}
	if connected(b, a) {
		t.Fatal("B holds a connection from a denied peer")
	}
	if err := connect(b, a); err == nil || !strings.Contains(err.Error(), "gater") {
		t.Fatalf("B dialled a denied peer: %v", err)
	}
	// The decision is audited with its origin.
	c := api.NewClient(b.SocketPath())
	defer c.Close()
	log, err := c.Audit(context.Background())
	if err != nil || len(log) != 1 || log[0].Action != "access" || log[0].To != "deny" || log[0].Peer != a.PeerID().String() {
		t.Fatalf("audit %+v, err %v", log, err)
	}
}

func TestAllowlistMode(t *testing.T) {
	b := startWith(t, func(c *config.Config) { c.Policy.Mode = config.PolicyAllowlist })
	a := startWith(t, nil)
	if err := connect(a, b); err == nil {
		labtest.WaitFor(t, 10*time.Second, "B drops an unknown peer", func() bool { return !connected(a, b) })
	}
	if connected(b, a) {
		t.Fatal("allowlist node kept a connection from an unknown peer")
	}
	change(t, b, a.PeerID(), api.PeerChange{Access: new(api.AccessAllow)})
	if err := connect(a, b); err != nil {
		t.Fatalf("allowed peer refused: %v", err)
	}
	labtest.WaitFor(t, 10*time.Second, "B sees the allowed peer", func() bool { return connected(b, a) })
	// Taking the allowance back disconnects it.
	change(t, b, a.PeerID(), api.PeerChange{Remove: true})
	labtest.WaitFor(t, 10*time.Second, "the forgotten peer is disconnected", func() bool { return !connected(b, a) })
}

func TestMalformedPeerIDChangesNothing(t *testing.T) {
	n := startWith(t, nil)
	c := api.NewClient(n.SocketPath())
	defer c.Close()
	err := c.ChangePeer(context.Background(), "not-a-peer", api.PeerChange{Access: new(api.AccessDeny)})
	if err == nil || !strings.Contains(err.Error(), "not a peer ID") {
		t.Fatalf("got %v", err)
	}
	if log, _ := c.Audit(context.Background()); len(log) != 0 {
		t.Fatalf("audit after a refused change: %+v", log)
	}
}

// On real hosts: a profile that needs trust refuses an untrusted peer with
// not_allowed, and serves it once trusted.
func TestTrustPolicyOnRealHosts(t *testing.T) {
	b := startWith(t, func(c *config.Config) {
		c.Profiles = append(c.Profiles, config.Profile{Name: "gpu", Executor: config.ExecutorEcho, MinTrust: config.TrustVerified})
	})
	a := startWith(t, nil)
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	run := func() (string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		id, err := a.Engine().Delegate(ctx, delegation.Request{Profile: "gpu", Peer: b.PeerID(), BudgetTokens: 10,
			Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("x")}}})
		if err != nil {
			t.Fatal(err)
		}
		d, err := a.Engine().Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return d.State.String(), d.Reason
	}
	if state, reason := run(); state != "rejected" || !strings.HasPrefix(reason, "not_allowed") {
		t.Fatalf("untrusted: %s %q, want rejected not_allowed", state, reason)
	}
	change(t, b, a.PeerID(), api.PeerChange{Trust: new(api.Verified)})
	if state, reason := run(); state != "completed" {
		t.Fatalf("verified: %s %q", state, reason)
	}
}

// libp2p's resource manager holds one peer to max_streams_per_peer.
func TestPerPeerStreamLimit(t *testing.T) {
	b := startWith(t, func(c *config.Config) { c.Limits.MaxStreamsPerPeer = 8 })
	f := startWith(t, nil)
	if err := connect(f, b); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for range 20 {
		s, err := f.Host().NewStream(context.Background(), b.PeerID(), protocol.ID)
		if err != nil {
			refused++
			continue
		}
		defer s.Reset()
		// The stream exists on B only once data arrives; B's limit shows
		// as a reset when it cannot admit it.
		_, _ = s.Write([]byte{0x80})
		_ = s.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := s.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			refused++
		}
	}
	if refused < 20-8 {
		t.Fatalf("%d of 20 streams refused; the per-peer limit is 8", refused)
	}
}

// offHostNetwork keeps a test node from multicasting out of the machine
// (mDNS) and from asking the host's router for port mappings (UPnP).
func offHostNetwork(c *config.Config) {
	c.Discovery.MDNS = false
	c.NAT.PortMapping = false
}
