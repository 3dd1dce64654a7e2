package main

// The LAN lab of TESTING.md ("A LAN lab: several nodes on one bridged
// segment"): five daemons, each in its own network namespace, on one Linux
// bridge in a private range (10.77.0.0/24), where AutoNAT never calls a node
// public. mDNS is off, so the nodes know each other only through their
// static peers, chained or in a star, and through the DHT and gossip with
// their default settings.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/node/api"
)

const (
	// lanNodes is how many daemons the LAN lab runs.
	lanNodes = 5
	// lanWait bounds each wait of the LAN test. It is a deadline for
	// something that must happen, not a figure: those are logged.
	lanWait = 90 * time.Second
	// lanProfile is the profile only the far node offers.
	lanProfile = "lanonly"
)

// lanIP is the address of node i of the LAN lab.
func lanIP(i int) string { return fmt.Sprintf("10.77.0.%d", i+1) }

// newLANLab builds the LAN lab: a namespace holding bridge br0 and n node
// namespaces (roles "lan0"…), node i at lanIP(i)/24. It reuses natLab's
// helpers, so cleanup is the same: every namespace is deleted, pass or fail.
func newLANLab(t *testing.T, n int) *natLab {
	t.Helper()
	l := emptyLab(t)
	br := l.addNS("lanbr")
	l.ip("-n", br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0")
	l.ip("-n", br, "link", "set", "dev", "br0", "up")
	for i := range n {
		ns := l.addNS(fmt.Sprintf("lan%d", i))
		port := fmt.Sprintf("v%d", i)
		l.ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", br)
		l.ip("-n", ns, "addr", "add", lanIP(i)+"/24", "dev", "eth0")
		l.ip("-n", ns, "link", "set", "dev", "eth0", "multicast", "on", "up")
		l.ip("-n", br, "link", "set", "dev", port, "master", "br0")
		l.ip("-n", br, "link", "set", "dev", port, "multicast", "on", "up")
	}
	return l
}

// setStaticPeers writes the top-level peers key of a node's config.toml.
func setStaticPeers(t *testing.T, n *testNode, peers []string) {
	t.Helper()
	path := filepath.Join(n.home, "config.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("peers = "+tomlList(peers...)+"\n"+string(b)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// lanResult is what one LAN scenario measured.
type lanResult struct {
	found    time.Duration // all daemons up until the far node's discover --profile lists the provider
	sources  []string      // the sources that named the provider then
	delegate time.Duration // kith delegate --profile, from the far node
	dhtModes []string      // each node's DHT mode at the end
}

func (r lanResult) String() string {
	return fmt.Sprintf("provider found %s after all daemons were up (sources %s); delegate --profile took %s; DHT modes %s",
		ms(r.found), strings.Join(r.sources, ","), ms(r.delegate), strings.Join(r.dhtModes, ","))
}

// TestLAN runs five daemons on one bridged segment with the default
// config (mDNS off, since the point is what the other sources do), in a
// chain (node i has node i-1 as its static peer) and in a star (every node
// has node 2 as its static peer). Node 4 alone offers a profile; node 0
// must find it with "kith discover --profile" and delegate to it with
// "kith delegate --profile" and "--peer". Each layout runs with gossip
// off, so that only the DHT can find the provider (lanDHT, and lanHubServer
// where node 2 has dht = "server", as the README once advised), and with
// every default (lanDefaults). A chain with the DHT off (lanGossipOnly)
// shows what happens to a provider heard of through gossip alone. It logs
// "LAN figures:" lines.
//
// It needs root and iproute2; "go test ./..." skips it unless
// KITH_LAN_TEST=1, and .ci/run runs it on its own.
func TestLAN(t *testing.T) {
	if os.Getenv("KITH_LAN_TEST") != "1" {
		t.Skip("LAN lab test (own CI step): run as root with KITH_LAN_TEST=1 go test -race -run TestLAN -v ./cmd/kith")
	}
	needNetnsRoot(t)
	t.Run("chain-"+lanGossipOnly, lanUnreachable)
	for _, layout := range []string{"chain", "star"} {
		for _, variant := range []string{lanDHT, lanHubServer, lanDefaults} {
			name := layout + "-" + variant
			t.Run(name, func(t *testing.T) {
				r := lanScenario(t, layout, variant)
				t.Logf("LAN figures: %s: %s", name, r)
			})
		}
	}
}

// Variants of the LAN scenario.
const (
	lanDHT       = "dht"        // gossip off, the DHT with its default mode everywhere
	lanHubServer = "hub-server" // gossip off, node 2 with dht = "server"
	lanDefaults  = "defaults"   // every default (but mDNS)
	// lanGossipOnly: the DHT off, so a provider heard of through gossip
	// alone has no known address (see lanUnreachable).
	lanGossipOnly = "gossip-only"
)

// lanHub is the node every other one has as its static peer in the star.
const lanHub = 2

// lanScenario builds a fresh LAN lab in layout, starts the daemons, and
// has node 0 find and use node 4's profile.
func lanScenario(t *testing.T, layout, variant string) lanResult {
	nodes, up := lanStart(t, layout, variant)
	far, prov := nodes[0], nodes[lanNodes-1]

	var res lanResult
	var d api.Discovery
	deadline := time.Now().Add(lanWait)
	for {
		r := far.kith("discover", "--profile", lanProfile, "--json")
		if r.code == 0 {
			d = api.Discovery{}
			if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
				t.Fatalf("discover --json: %v\n%s", err, r.stdout)
			}
			if slices.ContainsFunc(d.Peers, func(p api.DiscoveredPeer) bool { return p.Provider }) {
				break
			}
		}
		if time.Now().After(deadline) {
			for _, n := range nodes {
				t.Logf("%s discover:\n%s", n.name, n.kith("discover").stdout)
			}
			t.Fatalf("%s: no provider of %s after %v", far.name, lanProfile, lanWait)
		}
		time.Sleep(200 * time.Millisecond)
	}
	res.found = time.Since(up)
	p := d.Peers[0]
	if len(d.Peers) != 1 || p.ID != prov.id || !p.Provider || !p.Connected || !slices.Contains(p.Profiles, lanProfile) {
		t.Fatalf("discover --profile %s on %s: %+v; want only %s, verified", lanProfile, far.name, d.Peers, prov.id)
	}
	res.sources = p.Sources
	t.Logf("LAN figures: %s found %s's provider %s after all daemons were up (sources %s)", far.name, lanProfile, ms(res.found), strings.Join(p.Sources, ","))

	// What discover shows, delegate reaches: by profile and by peer.
	start := time.Now()
	r := far.kith("delegate", "--profile", lanProfile, "--budget", "100", "across the LAN")
	res.delegate = time.Since(start)
	r.mustSucceed(t)
	if got := strings.TrimSpace(r.stdout); got != "across the LAN" {
		t.Fatalf("delegate --profile printed %q", got)
	}
	r = far.kith("delegate", "--profile", lanProfile, "--peer", prov.id, "--budget", "100", "by name")
	r.mustSucceed(t)

	for _, n := range nodes {
		var nd api.Discovery
		if err := json.Unmarshal([]byte(n.kith("discover", "--json").mustOK(t)), &nd); err != nil {
			t.Fatal(err)
		}
		res.dhtModes = append(res.dhtModes, nd.DHTMode)
		// Every peer listed says where it came from.
		for _, p := range nd.Peers {
			if len(p.Sources) == 0 {
				t.Errorf("%s: discover lists %s with no source: %+v", n.name, p.ID, p)
			}
		}
	}
	return res
}

// lanUnreachable: with the DHT off, node 0 hears node 4's advert through
// gossip, which carries no address. discover must say that the provider
// cannot be reached and why, and delegate must fail saying the same,
// rather than list a provider that delegate then cannot find.
func lanUnreachable(t *testing.T) {
	nodes, _ := lanStart(t, "chain", lanGossipOnly)
	far, prov := nodes[0], nodes[lanNodes-1]
	var d api.Discovery
	deadline := time.Now().Add(lanWait)
	for {
		r := far.kith("discover", "--profile", lanProfile, "--json")
		r.mustSucceed(t)
		d = api.Discovery{}
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("discover --json: %v\n%s", err, r.stdout)
		}
		if len(d.Peers) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never heard of %s's provider through gossip", far.name, lanProfile)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p := d.Peers[0]
	if len(d.Peers) != 1 || p.ID != prov.id || p.Provider || p.Unreachable == "" || !slices.Contains(p.Sources, "gossip") {
		t.Fatalf("discover --profile %s: %+v; want %s from gossip, not a provider, with the reason it is unreachable", lanProfile, d.Peers, prov.id)
	}
	r := far.kith("discover", "--profile", lanProfile)
	if r.code == 0 || !strings.Contains(r.stderr, "cannot be reached: "+p.Unreachable) {
		t.Fatalf("discover --profile %s should fail and say why the provider cannot be reached; %v", lanProfile, r)
	}
	r = far.kith("delegate", "--profile", lanProfile, "--peer", prov.id, "--budget", "100", "unreachable")
	if r.code == 0 || !strings.Contains(r.stderr+r.stdout, "DHT is off") {
		t.Fatalf("delegate --peer to a provider with no known address should fail saying why; %v", r)
	}
	t.Logf("LAN figures: gossip-only: %s is listed as unreachable: %s", prov.name, p.Unreachable)
}

// lanStart builds a fresh LAN lab in layout, configures the daemons for
// variant and starts them; it returns them and when the last was up.
func lanStart(t *testing.T, layout, variant string) ([]*testNode, time.Time) {
	lab := newLANLab(t, lanNodes)
	dir := testDir(t)
	extra := "[discovery]\nmdns = false\n"
	switch variant {
	case lanGossipOnly:
		extra += "dht = \"off\"\n"
	case lanDHT, lanHubServer:
		extra += "gossip = false\n"
	}
	nodes := make([]*testNode, lanNodes)
	addrOf := make([]string, lanNodes)
	for i := range nodes {
		cfg := extra
		if variant == lanHubServer && i == lanHub {
			cfg += "dht = \"server\"\n"
		}
		if i == lanNodes-1 {
			cfg += fmt.Sprintf("\n[[profiles]]\nname = %q\nexecutor = \"echo\"\n", lanProfile)
		}
		nodes[i] = initNode(t, dir, fmt.Sprintf("n%d", i), []string{"/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"}, cfg)
		addrOf[i] = "/ip4/" + lanIP(i) + "/tcp/4001/p2p/" + nodes[i].id
	}
	for i, n := range nodes {
		switch {
		case layout == "chain" && i > 0:
			setStaticPeers(t, n, []string{addrOf[i-1]})
		case layout == "star" && i != lanHub:
			setStaticPeers(t, n, []string{addrOf[lanHub]})
		}
	}
	for i, n := range nodes {
		n.startIn(lab.ns(fmt.Sprintf("lan%d", i)))
	}
	return nodes, time.Now()
}
