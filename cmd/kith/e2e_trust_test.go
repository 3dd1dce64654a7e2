package main

import (
	"context"
	"strings"
	"testing"
	"time"
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
	deadline := time.Now().Add(10 * time.Second)
	for connectedTo(t, b, a.id) {
		if time.Now().After(deadline) {
			t.Fatal("B still connected to A after kith peers deny")
		}
		time.Sleep(20 * time.Millisecond)
	}
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
