package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/internal/labtest"
)

// The allow/deny CLI on a running daemon: `kith peers deny` closes the
// peer's live connection at once, the change is in `kith peers log`, and a
// denied peer cannot delegate. With the daemon stopped the same commands
// edit the store, and a malformed ID changes nothing.
func TestE2EPeersTrustAndDeny(t *testing.T) {
	a, b := pair(t, "")
	a.kith("delegate", "--profile", "echo", "--peer", b.id, "--budget", "10", "before").mustSucceed(t)
	if !connectedTo(t, b, a.id) {
		t.Fatal("B does not list A as connected after a delegation")
	}

	r := b.kith("peers", "deny", "not-a-peer-id")
	if r.code == 0 || !strings.Contains(r.stderr, "is not a peer ID") {
		t.Fatalf("malformed ID: %v", r)
	}
	b.kith("peers", "deny", a.id).mustSucceed(t)
	labtest.WaitFor(t, 10*time.Second, "B to drop its connections to A after kith peers deny", func() bool { return !connectedTo(t, b, a.id) })
	r = a.kith("delegate", "--profile", "echo", "--peer", b.id, "--budget", "10", "--timeout", "30s", "after")
	if r.code == 0 || !strings.Contains(r.stderr, "provider_unreachable") {
		t.Fatalf("a denied peer delegated, or was not told the provider is unreachable: %v", r)
	}
	log := b.kith("peers", "log")
	log.mustSucceed(t)
	if !strings.Contains(log.stdout, a.id) || !strings.Contains(log.stdout, "deny") || !strings.Contains(log.stdout, "cli") {
		t.Fatalf("audit log does not show the deny: %v", log)
	}
	if !strings.Contains(log.stdout, "access") || strings.Count(log.stdout, "\n") != 2 {
		t.Fatalf("audit log should hold exactly the one change (the malformed ID changed nothing): %v", log)
	}

	// With B stopped, trust changes go to its store and hold at start.
	b.kill()
	b.kith("peers", "trust", a.id, "trusted").mustSucceed(t)
	offline := b.kith("peers", "log")
	offline.mustSucceed(t)
	if !strings.Contains(offline.stdout, "trusted") || !strings.Contains(offline.stdout, "daemon stopped") {
		t.Fatalf("offline trust change not in the log: %v", offline)
	}
	b.start()
	peers := b.kith("peers", "ls")
	peers.mustSucceed(t)
	if !strings.Contains(peers.stdout, "trusted") || !strings.Contains(peers.stdout, "deny") {
		t.Fatalf("peers ls after restart: %v", peers)
	}
}

// kith gpu on a machine without NVIDIA says so and exits 0.
func TestE2EGPUWithoutNVIDIA(t *testing.T) {
	dir := testDir(t)
	n := newNode(t, dir, "g", "")
	r := n.kith("gpu")
	r.mustSucceed(t)
	if !strings.Contains(r.stdout, "no NVIDIA GPU") {
		t.Skipf("this machine has an NVIDIA GPU: %v", r) // the GPU path is covered by TestRealNVML
	}
}

func connectedTo(t *testing.T, n *testNode, id string) bool {
	t.Helper()
	c := n.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	peers, err := c.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if p.ID == id {
			return p.Connected
		}
	}
	return false
}

// TestE2EStrangersGetEchoOnly: with the default config, a peer the provider
// never named can run echo (the quickstart) and nothing that spends real
// resources; once the provider adds it ("kith peers add") or allows it
// ("kith peers allow") it is verified and may. Naming a peer never lowers
// a trust the user set higher.
func TestE2EStrangersGetEchoOnly(t *testing.T) {
	a, b := pair(t, fmt.Sprintf("[[profiles]]\nname = \"upper\"\nexecutor = \"exec\"\ncommand = %s\n", tomlList("tr", "a-z", "A-Z")))
	dir := filepath.Dir(a.home)
	c := newNode(t, dir, "c", "")
	c.start()
	c.kith("peers", "add", b.addr("/tcp/")).mustSucceed(t)

	for _, n := range []*testNode{a, c} {
		n.kith("delegate", "--profile", "echo", "--peer", b.id, "--budget", "100", "hello").mustSucceed(t)
		r := n.kith("delegate", "--profile", "upper", "--peer", b.id, "--budget", "100", "--timeout", "30s", "shout")
		if r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, "not_allowed") {
			t.Fatalf("%s, a stranger to b, used b's exec profile or was not told not_allowed; %v", n.name, r)
		}
	}
	if got := trustOn(t, b, a.id); got != "untrusted" {
		t.Fatalf("b trusts a stranger it never named: %q", got)
	}

	b.kith("peers", "add", a.addr("/tcp/")).mustSucceed(t)
	b.kith("peers", "allow", c.id).mustSucceed(t)
	for _, n := range []*testNode{a, c} {
		if got := trustOn(t, b, n.id); got != "verified" {
			t.Errorf("b trusts %s, which it named, as %q; want verified", n.name, got)
		}
		r := n.kith("delegate", "--profile", "upper", "--peer", b.id, "--budget", "100", "shout")
		r.mustSucceed(t)
		if r.stdout != "SHOUT\n" {
			t.Errorf("%s's exec delegation returned %q, want %q", n.name, r.stdout, "SHOUT\n")
		}
	}

	b.kith("peers", "trust", a.id, "trusted").mustSucceed(t)
	b.kith("peers", "add", a.addr("/tcp/")).mustSucceed(t)
	b.kith("peers", "allow", a.id).mustSucceed(t)
	if got := trustOn(t, b, a.id); got != "trusted" {
		t.Errorf("naming a trusted peer again changed its trust to %q", got)
	}
}

// trustOn is the trust n's "kith peers ls" shows for the peer id.
func trustOn(t *testing.T, n *testNode, id string) string {
	t.Helper()
	r := n.kith("peers", "ls")
	r.mustSucceed(t)
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == id {
			return f[2]
		}
	}
	return "untrusted" // not in the store: nothing was set
}
