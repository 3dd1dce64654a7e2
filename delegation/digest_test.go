package delegation

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Proof digests (protocol 1.6): a requester asks for the hash it makes
// fastest, a provider that makes the same one fastest agrees, and every
// other pair, an older provider included, falls back to SHA-256. Small
// offers are hashed at once, large ones in the background on both sides,
// where the requester's hash, begun with the digest it asked for, must
// give way to the one the proof names.
func TestProofDigestNegotiated(t *testing.T) {
	sha, b3 := protocol.DigestSHA256, protocol.DigestBLAKE3
	var older []protocol.Version
	for _, v := range protocol.Supported {
		if v.Less(protocol.ProofDigests) {
			older = append(older, v)
		}
	}
	cases := []struct {
		name                string
		requester, provider protocol.ProofDigest
		providerVersions    []protocol.Version
		asked, used         protocol.ProofDigest
	}{
		{"both prefer BLAKE3", b3, b3, nil, b3, b3},
		{"the provider prefers SHA-256", b3, sha, nil, b3, sha},
		{"the requester prefers SHA-256", sha, b3, nil, sha, sha},
		{"both prefer SHA-256", sha, sha, nil, sha, sha},
		{"a 1.5 provider", b3, b3, older, sha, sha},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nodes := newMesh(t, 2, largeEcho)
			a, b := nodes[0], nodes[1]
			a.engine().SetDigest(c.requester)
			b.engine().SetDigest(c.provider)
			if c.providerVersions != nil {
				b.engine().SetVersions(c.providerVersions)
			}
			for _, size := range []int{40, 3 * digestAsideMin} {
				text := strings.Repeat("d", size)
				id, err := a.engine().Delegate(ctx, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask(text), BudgetTokens: 1 << 20})
				if err != nil {
					t.Fatal(err)
				}
				d, err := a.engine().Wait(ctx, id)
				if err != nil || d.State != protocol.StateCompleted || Output(d) != text {
					t.Fatalf("%d bytes: %s %q, %v", size, d.State, d.Reason, err)
				}
				if d, err = a.engine().Get(id); err != nil { // the record with its offer
					t.Fatal(err)
				}
				if got := protocol.OfferProofDigest(d.Offer); got != c.asked {
					t.Fatalf("%d bytes: the offer asked for %s, want %s", size, got, c.asked)
				}
				p, err := a.engine().Verify(id)
				if err != nil {
					t.Fatalf("%d bytes: verify: %v", size, err)
				}
				if p.Digest != c.used {
					t.Fatalf("%d bytes: the proof is made with %s, want %s", size, p.Digest, c.used)
				}
				if p.OfferHash != c.used.Sum(d.Offer) || p.OutputHash != protocol.OutputDigest(c.used, []protocol.Part{protocol.TextPart(text)}) {
					t.Fatalf("%d bytes: the proof's digests are not %s of the offer and output", size, c.used)
				}
				// The provider stores the result it signed (after sending
				// it, when the result was provisional).
				waitStored(t, ctx, b, store.RoleProvider, id, "the provider's record", func(d store.Delegation, err error) bool {
					return err == nil && d.State == protocol.StateCompleted
				})
			}
		})
	}
}

// largeEcho lets the echo profile take budgets of large payloads.
func largeEcho(_ int, c *Config) { c.Profiles[0].MaxBudgetTokens = 1 << 20 }

// TestProofDigestLocal: a node's own delegations are proved with its
// digest, and verify again.
func TestProofDigestLocal(t *testing.T) {
	for _, alg := range []protocol.ProofDigest{protocol.DigestSHA256, protocol.DigestBLAKE3} {
		t.Run(alg.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			a := newMesh(t, 1, largeEcho)[0]
			a.engine().SetDigest(alg)
			text := strings.Repeat("l", 2*digestAsideMin)
			id, err := a.engine().Delegate(ctx, Request{Profile: "echo", Task: textTask(text), BudgetTokens: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			d, err := a.engine().Wait(ctx, id)
			if err != nil || d.State != protocol.StateCompleted || Output(d) != text {
				t.Fatalf("wait: %s %q, %v", d.State, d.Reason, err)
			}
			if d, err = a.engine().Get(id); err != nil { // the record with its offer
				t.Fatal(err)
			}
			p, err := a.engine().Verify(id)
			if err != nil || p.Digest != alg || p.OfferHash != alg.Sum(d.Offer) {
				t.Fatalf("verify: digest %s, %v; want %s over the offer", p.Digest, err, alg)
			}
		})
	}
}
