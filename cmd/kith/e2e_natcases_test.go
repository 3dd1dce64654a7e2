package main

// NAT edge cases in the lab of netns_test.go: a home whose router blocks
// UDP, and a relay that dies and comes back.

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/node/api"
)

// natBothTransports is the config part every node of these cases shares:
// listening on TCP and QUIC port 4001, and quiet.
const (
	natQuiet      = "[discovery]\nmdns = false\ndht = \"off\"\n"
	natListenTCP  = "/ip4/0.0.0.0/tcp/4001"
	natListenQUIC = "/ip4/0.0.0.0/udp/4001/quic-v1"
)

// natCaseNodes creates the relay and two home nodes of the lab, each
// listening on TCP and QUIC, the homes listing both of the relay's
// addresses, and starts the relay.
func natCaseNodes(t *testing.T, lab *natLab) (relay, a, b *testNode, relayAddrs []string) {
	t.Helper()
	dir := testDir(t)
	listen := []string{natListenTCP, natListenQUIC}
	relay = initNode(t, dir, "relay", listen, natQuiet+
		"[nat]\nport_mapping = false\nrelay = true\n[policy]\nmode = \"allowlist\"\n")
	relayAddrs = []string{
		"/ip4/" + labRelayIP + "/udp/4001/quic-v1/p2p/" + relay.id,
		"/ip4/" + labRelayIP + "/tcp/4001/p2p/" + relay.id,
	}
	home := natQuiet + "[nat]\nport_mapping = false\nrelays = " + tomlList(relayAddrs...) + "\n"
	a = initNode(t, dir, "a", listen, home)
	b = initNode(t, dir, "b", listen, home)
	relay.startIn(lab.ns(nsRelay))
	relay.kith("peers", "allow", a.id).mustSucceed(t)
	relay.kith("peers", "allow", b.id).mustSucceed(t)
	return relay, a, b, relayAddrs
}

// TestNATUDPBlocked: both homes behind port-preserving NAT, B's router
// dropping UDP, both listing the relay's QUIC and TCP addresses. B reaches
// A through the relay over TCP; the hole punch must then find a direct TCP
// path, which needs A to know its public TCP address although QUIC reaches
// the relay too. It logs a "NAT figures:" line.
func TestNATUDPBlocked(t *testing.T) {
	if os.Getenv("KITH_NAT_TEST") != "1" {
		t.Skip("NAT lab test (own CI step): run as root with KITH_NAT_TEST=1 go test -race -run TestNAT -v ./cmd/kith")
	}
	needNetnsRoot(t)
	lab := newNATLab(t, natPortPreserving)
	lab.blockUDP(nsNATB)
	relay, a, b, relayAddrs := natCaseNodes(t, lab)
	a.startIn(lab.ns(nsHostA))
	b.startIn(lab.ns(nsHostB))

	// B can hold its reservation only over TCP; A holds one over both.
	circuitTCP := relayAddrs[1] + "/p2p-circuit/p2p/" + a.id
	waitStatus(t, a, "relay reservation", func(s api.Status) bool { return slices.Contains(s.RelayAddrs, circuitTCP) })
	waitStatus(t, b, "relay reservation over TCP", func(s api.Status) bool {
		return slices.ContainsFunc(s.RelayAddrs, func(x string) bool { return strings.Contains(x, "/tcp/") })
	})

	learned := time.Now()
	b.kith("peers", "add", circuitTCP).mustSucceed(t)
	r := b.kith("delegate", "--profile", "echo", "--peer", a.id, "hello without UDP")
	r.mustSucceed(t)
	var direct time.Duration
	st := waitStatus(t, b, "direct TCP connection to a", func(s api.Status) bool {
		p, ok := peerIn(s, a.id)
		if !ok || p.Path != api.PathDirect {
			return false
		}
		direct = time.Since(learned)
		return true
	})
	p, _ := peerIn(st, a.id)
	for _, c := range p.Conns {
		if !c.Relayed && !strings.Contains(c.Addr, "/tcp/") {
			t.Fatalf("b's direct connection to a is %s; UDP is blocked, so it must be TCP", c.Addr)
		}
	}
	if hp := p.HolePunch; hp == nil || !hp.Success {
		t.Fatalf("b's direct connection to a came without a successful hole punch: %+v", p.HolePunch)
	}
	as := nodeStatus(t, a)
	var observed []string
	for _, o := range as.ObservedAddrs {
		observed = append(observed, o.Addr)
	}
	t.Logf("NAT figures: udp-blocked: direct TCP connection %s after b learned a's relay address (hole punch %s); a's observed addresses %v; relay %s",
		ms(direct), punchText(p.HolePunch), observed, relay.id)
	if got := delegateRoundTrip(t, b, a.id, "direct now"); got <= 0 {
		t.Fatal("no round trip")
	}
}

// TestNATRelayRestart: the relay dies (SIGKILL) while a home node holds a
// reservation on it, and comes back on the same addresses. The home node
// must stop handing out circuit addresses through the dead relay, and hold
// a reservation again soon after its return. It logs how long each took.
func TestNATRelayRestart(t *testing.T) {
	if os.Getenv("KITH_NAT_TEST") != "1" {
		t.Skip("NAT lab test (own CI step): run as root with KITH_NAT_TEST=1 go test -race -run TestNAT -v ./cmd/kith")
	}
	needNetnsRoot(t)
	lab := newNATLab(t, natPortPreserving)
	relay, a, _, _ := natCaseNodes(t, lab)
	a.startIn(lab.ns(nsHostA))

	hasCircuit := func(addrs []string) bool {
		return slices.ContainsFunc(addrs, func(x string) bool { return strings.Contains(x, relay.id+"/p2p-circuit") })
	}
	// handsOut is whether a gives out an address through the relay: in its
	// status and in its node info (kith id), which the API hands out.
	handsOut := func() bool {
		c := a.client()
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		info, err := c.Node(ctx)
		if err != nil {
			t.Fatalf("a: node info: %v", err)
		}
		return hasCircuit(nodeStatus(t, a).RelayAddrs) || hasCircuit(info.Addrs)
	}
	waitStatus(t, a, "relay reservation", func(s api.Status) bool { return hasCircuit(s.RelayAddrs) })

	relayNS := lab.ns(nsRelay)
	relay.kill()
	killed := time.Now()
	var dropped time.Duration
	for handsOut() {
		if time.Since(killed) > natWait+30*time.Second {
			t.Fatalf("a still hands out circuit addresses through the dead relay %v after it died; log:\n%s", time.Since(killed), a.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	dropped = time.Since(killed)

	relay.startIn(relayNS)
	back := time.Now()
	for !handsOut() {
		if time.Since(back) > natWait+30*time.Second {
			t.Fatalf("a holds no reservation %v after the relay came back; log:\n%s", time.Since(back), a.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("NAT figures: relay restart: circuit addresses dropped %s after the relay died; reservation again %s after it came back",
		ms(dropped), ms(time.Since(back)))
}
