package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/api"
)

// Two daemons with no static peers find each other over mDNS and complete
// a delegation; the requester's "kith discover" shows the provider's
// verified profile with source mdns.
func TestMDNSDaemonsFindEachOtherAndDelegate(t *testing.T) {
	labtest.PrivateMulticast(t, "./cmd/kith")
	dir := testDir(t)
	const lan = "[discovery]\nmdns = true\ndht = \"off\"\n"
	a := newNode(t, dir, "a", lan+"\n[[profiles]]\nname = \"lan-echo\"\nexecutor = \"echo\"\n")
	b := newNode(t, dir, "b", lan)
	start := time.Now()
	a.start()
	b.start()

	var found api.DiscoveredPeer
	deadline := time.Now().Add(stateWait)
	for found.ID == "" {
		r := b.kith("discover", "--json")
		r.mustSucceed(t)
		var d api.Discovery
		if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
			t.Fatalf("kith discover --json: %v\n%s", err, r.stdout)
		}
		for _, p := range d.Peers {
			if p.ID == a.id && slices.Contains(p.Profiles, "lan-echo") {
				found = p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never verified a's profiles over mDNS; last discover:\n%s", r.stdout)
		}
		time.Sleep(pollEvery)
	}
	t.Logf("mDNS: b verified a's profiles %v after %v (both daemons started in that time)", found.Profiles, time.Since(start))
	if !slices.Contains(found.Sources, "mdns") || !found.Connected {
		t.Fatalf("a as b sees it: %+v; want source mdns, connected", found)
	}

	r := b.kith("delegate", "--profile", "lan-echo", "--budget", "100", "hello over mdns")
	r.mustSucceed(t)
	if got := strings.TrimSpace(r.stdout); got != "hello over mdns" {
		t.Fatalf("delegate printed %q", got)
	}
	r = b.kith("discover")
	r.mustSucceed(t)
	if !strings.Contains(r.stdout, a.id) || !strings.Contains(r.stdout, "mdns") {
		t.Fatalf("kith discover does not list a with source mdns:\n%s", r.stdout)
	}
}
