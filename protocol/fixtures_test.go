package protocol

import (
	"bytes"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
)

// Fixed inputs for golden vectors, round trips, fuzz seeds and benchmarks.
// Every field is set to something other than its zero value, so a change
// in how any field encodes moves a golden vector. Keys come from fixed
// seeds and Ed25519 signatures are deterministic, so signed payloads are
// fixed too.

var fixedTime = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func fixedIdentity(tb testing.TB, seed byte) *crypto.Identity {
	tb.Helper()
	id, err := crypto.IdentityFromSeed(bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

type fixturePeers struct {
	requester, provider, relay *crypto.Identity
}

func peers(tb testing.TB) fixturePeers {
	return fixturePeers{fixedIdentity(tb, 1), fixedIdentity(tb, 2), fixedIdentity(tb, 3)}
}

func (p fixturePeers) ids() (requester, provider, relay peer.ID) {
	return p.requester.PeerID(), p.provider.PeerID(), p.relay.PeerID()
}

var (
	fixtureDelegation = DelegationID{0x0d, 0xe1, 0xe9, 0xa7, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01}
	fixtureParent     = DelegationID{0x0d, 0xe1, 0xe9, 0xa7, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02}
)

func fixtureCapabilityAssertion(tb testing.TB) CapabilityAssertion {
	_, provider, _ := peers(tb).ids()
	return CapabilityAssertion{
		Provider: provider,
		Profiles: []Profile{
			{
				Name:            "summarize",
				Description:     "Summarize text with a local 8B model",
				Skills:          []string{"summarization", "english"},
				MaxBudgetTokens: 32000,
				VRAMMiB:         6144,
			},
			{Name: "echo", MaxBudgetTokens: 1000},
		},
		Capacity:     Capacity{Active: 1, FreeSlots: 3},
		Versions:     []Version{{1, 0}},
		GrantedTrust: Verified,
		IssuedAt:     fixedTime,
		ExpiresAt:    fixedTime.Add(10 * time.Minute),
	}
}

func fixtureResultProof(tb testing.TB) ResultProof {
	requester, provider, _ := peers(tb).ids()
	return ResultProof{
		DelegationID:   fixtureDelegation,
		Requester:      requester,
		Provider:       provider,
		OfferHash:      sha256.Sum256([]byte("offer")),
		TranscriptHash: sha256.Sum256([]byte("transcript")),
		Usage:          Usage{Prompt: 120, Completion: 80, Total: 200},
		CompletedAt:    fixedTime.Add(1500 * time.Millisecond),
		State:          StateCompleted,
	}
}

func fixtureTask() Task {
	return Task{
		Role: "user",
		Parts: []Part{
			TextPart("Summarize the attached report in three bullet points."),
			DataPart([]byte(`{"language":"en","max_bullets":3}`)),
			FilePart(File{Name: "report.txt", MediaType: "text/plain", Bytes: []byte("Q3 revenue grew 12%.\n")}),
			FilePart(File{Name: "appendix.pdf", MediaType: "application/pdf", URI: "https://example.org/appendix.pdf"}),
		},
	}
}

// fixtureMessages returns one message of each type, in MessageType order.
func fixtureMessages(tb testing.TB) []Message {
	p := peers(tb)
	requester, _, relay := p.ids()
	capability, err := SignCapability(p.provider, fixtureCapabilityAssertion(tb))
	if err != nil {
		tb.Fatal(err)
	}
	proof, err := SignResultProof(p.provider, fixtureResultProof(tb))
	if err != nil {
		tb.Fatal(err)
	}
	return []Message{
		&CapabilityQuery{Versions: []Version{{1, 0}, {1, 1}}, Profiles: []string{"summarize", "echo"}},
		&CapabilityResponse{Assertion: capability},
		&DelegationOffer{
			ID:           fixtureDelegation,
			Profile:      "summarize",
			Task:         fixtureTask(),
			ContextID:    "ctx-7f3a",
			BudgetTokens: 4000,
			Timeout:      90 * time.Second,
			HopLimit:     3,
			Chain:        []peer.ID{relay, requester},
			Priority:     -2,
			ParentID:     fixtureParent,
		},
		&DelegationAccept{
			ID:             fixtureDelegation,
			ProviderHandle: "prov-000042",
			Lease:          Lease{VRAMMiB: 6144, Device: "GPU-8f1c2d3e-0000-4000-8000-000000000001"},
		},
		&DelegationReject{ID: fixtureDelegation, Reason: ReasonBudgetTooHigh, Detail: "budget 4000 above profile maximum 2000"},
		&DelegationStatus{
			ID:               fixtureDelegation,
			State:            StateRunning,
			ProgressPermille: 250,
			Partial:          []Part{TextPart("- Revenue grew")},
			Seq:              7,
			Reason:           "generating",
		},
		&DelegationResult{
			ID:       fixtureDelegation,
			State:    StateCompleted,
			Output:   []Part{TextPart("- Revenue grew 12%\n- Costs flat\n- Outlook raised"), DataPart([]byte(`{"bullets":3}`))},
			Usage:    Usage{Prompt: 120, Completion: 80, Total: 200},
			Duration: 1500 * time.Millisecond,
			Proof:    proof,
			Reason:   "done",
		},
		&DelegationCancel{ID: fixtureDelegation, Reason: "requester shutting down"},
	}
}
