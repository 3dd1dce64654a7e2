package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/api"
)

// A node that knows only one bootstrap peer finds, through the private
// DHT, the provider of a profile that no source listed to it, verifies
// it, and delegates to it.
func TestDiscoverProfileThroughDHT(t *testing.T) {
	dir := testDir(t)
	const dht = "[discovery]\ndht = \"server\"\ngossip = false\n"
	boot := newNode(t, dir, "boot", dht)
	boot.start()
	prov := newNode(t, dir, "prov", dht+"\n[[profiles]]\nname = \"rare\"\nexecutor = \"echo\"\n")
	prov.start()
	prov.kith("peers", "add", boot.addr("/tcp/")).mustSucceed(t)
	req := newNode(t, dir, "req", dht)
	req.start()
	req.kith("peers", "add", boot.addr("/tcp/")).mustSucceed(t)

	// Before: no verified capability of the requester's lists rare (the
	// DHT's own traffic may connect it to the provider, but connecting
	// says nothing about profiles).
	var before api.Discovery
	r := req.kith("discover", "--json")
	r.mustSucceed(t)
	if err := json.Unmarshal([]byte(r.stdout), &before); err != nil {
		t.Fatal(err)
	}
	for _, p := range before.Peers {
		if slices.Contains(p.Profiles, "rare") {
			t.Fatalf("the requester already knows a provider of rare: %+v", p)
		}
	}

	var d api.Discovery
	labtest.WaitFor(t, stateWait, "the DHT names the provider of rare", func() bool {
		r := req.kith("discover", "--profile", "rare", "--json")
		if r.code != 0 {
			return false
		}
		d = api.Discovery{}
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("discover --json: %v\n%s", err, r.stdout)
		}
		return len(d.Peers) == 1
	})
	p := d.Peers[0]
	if p.ID != prov.id || !slices.Contains(p.Sources, "dht") || !slices.Contains(p.Profiles, "rare") || !p.Provider {
		t.Fatalf("discover --profile rare: %+v; want the provider, source dht, profile rare verified", p)
	}
	if d.DHTMode != "server" {
		t.Fatalf("DHT mode %q", d.DHTMode)
	}

	r = req.kith("delegate", "--profile", "rare", "--budget", "100", "found you")
	r.mustSucceed(t)
	if got := strings.TrimSpace(r.stdout); got != "found you" {
		t.Fatalf("delegate printed %q", got)
	}
	r = req.kith("discover")
	r.mustSucceed(t)
	for _, want := range []string{prov.id, boot.id, "dht", "static", "rare (query)"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("kith discover lacks %q:\n%s", want, r.stdout)
		}
	}
}
