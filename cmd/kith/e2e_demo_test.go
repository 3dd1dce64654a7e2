package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kith demo is a newcomer's first minute: two nodes, one delegation, every
// message printed as it crosses, and the verified proof.
func TestE2EDemo(t *testing.T) {
	testDir(t) // honours -short like the other process tests
	r := runKith(t, "demo", "hello from the test")
	r.mustSucceed(t)
	for _, want := range []string{
		"capability_query", "capability_response", "delegation_offer", "delegation_accept",
		"delegation_status", "delegation_result", `result: "hello from the test"`, "proof: valid, signed by bob",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// kith bench runs its phases side by side and reports the goals.
func TestE2EBenchShort(t *testing.T) {
	testDir(t)
	r := runKith(t, "bench", "--duration", "150ms", "--warmup", "20ms", "--concurrency", "1", "--stores", "memory", "--fsync-samples", "5", "--large", "64KiB", "--large-runs", "1")
	r.mustSucceed(t)
	for _, want := range []string{"bare-echo", "delegation", "memory", "goals", "fsync", "large payloads", "64 KiB", "bare copy"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bench output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// On a fresh machine one command runs a node: kith daemon initializes a
// home that has no identity yet.
func TestE2EDaemonInitializesFreshHome(t *testing.T) {
	dir := testDir(t)
	n := &testNode{t: t, name: "fresh", home: filepath.Join(dir, "fresh"), log: filepath.Join(dir, "fresh.log")}
	t.Cleanup(n.cleanup)
	n.start("--listen", "/ip4/127.0.0.1/tcp/0")
	if _, err := os.Stat(filepath.Join(n.home, "identity.key")); err != nil {
		t.Fatalf("no identity after kith daemon on a fresh home: %v", err)
	}
	if _, err := os.Stat(filepath.Join(n.home, "config.toml")); err != nil {
		t.Fatalf("no config after kith daemon on a fresh home: %v", err)
	}
}
