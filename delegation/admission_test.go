package delegation

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
)

func TestTrustPolicyGuardsProfile(t *testing.T) {
	nodes := newMesh(t, 2, func(i int, c *Config) {
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "gpu", MaxBudgetTokens: 100},
			MinTrust: protocol.Verified, Executor: executor.Echo{}})
	})
	a, b := nodes[0], nodes[1]
	req := Request{Profile: "gpu", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 10}
	d := delegateAndWait(t, a, req)
	if d.State != protocol.StateRejected || !strings.HasPrefix(d.Reason, "not_allowed") {
		t.Fatalf("untrusted peer: state %s reason %q, want rejected not_allowed", d.State, d.Reason)
	}
	// B does not even show the profile to an untrusted asker.
	caps, err := a.engine().QueryCapabilities(context.Background(), b.id.PeerID())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range caps.Profiles {
		if p.Name == "gpu" {
			t.Fatal("profile needing verified trust advertised to an untrusted peer")
		}
	}
	if err := b.st.SetTrust(a.id.PeerID(), protocol.Verified, "test"); err != nil {
		t.Fatal(err)
	}
	if d := delegateAndWait(t, a, req); d.State != protocol.StateCompleted {
		t.Fatalf("verified peer: state %s (%s)", d.State, d.Reason)
	}
}

func TestOfferRateLimit(t *testing.T) {
	nodes := newMesh(t, 2, func(i int, c *Config) {
		c.OffersPerSecond, c.OfferBurst = 0.5, 2
	})
	a, b := nodes[0], nodes[1]
	var reasons []string
	for range 4 {
		d := delegateAndWait(t, a, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 10})
		reasons = append(reasons, d.State.String()+":"+d.Reason)
	}
	if !strings.HasPrefix(reasons[0], "completed") || !strings.HasPrefix(reasons[1], "completed") {
		t.Fatalf("the burst should pass: %q", reasons)
	}
	if !strings.HasPrefix(reasons[2], "rejected:rate_limited") {
		t.Fatalf("third offer within the second: %q, want rejected rate_limited", reasons)
	}
}

func TestQueryTrustSilencesQueries(t *testing.T) {
	nodes := newMesh(t, 2, func(i int, c *Config) {
		c.QueryTrust = protocol.Trusted
		c.Conn.IOTimeout = 300 * time.Millisecond
	})
	a, b := nodes[0], nodes[1]
	if _, err := a.engine().QueryCapabilities(context.Background(), b.id.PeerID()); err == nil {
		t.Fatal("an untrusted peer's capability query was answered")
	}
	if err := b.st.SetTrust(a.id.PeerID(), protocol.Trusted, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.engine().QueryCapabilities(context.Background(), b.id.PeerID()); err != nil {
		t.Fatalf("trusted peer's query: %v", err)
	}
}
