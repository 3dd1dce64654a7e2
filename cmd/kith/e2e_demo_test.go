package main

import (
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
	r := runKith(t, "bench", "--duration", "150ms", "--warmup", "20ms", "--concurrency", "1", "--stores", "memory", "--fsync-samples", "5")
	r.mustSucceed(t)
	for _, want := range []string{"bare-echo", "delegation", "memory", "goals", "fsync"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bench output lacks %q:\n%s", want, r.stdout)
		}
	}
}
