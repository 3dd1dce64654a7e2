package bench

import (
	"fmt"
	"time"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// ProofCost is what the result proof of every delegation costs in
// public-key work on this CPU: the provider signs it and the requester
// verifies it, one after the other on the delegation's critical path.
// Neither can go: the signed proof is what a requester keeps as evidence
// of who produced a result (protocol.ResultProof).
type ProofCost struct {
	Sign   Latency `json:"sign"`
	Verify Latency `json:"verify"`
}

// proofSamples is how many proofs the probe signs and verifies.
const proofSamples = 200

// measureProof signs and verifies n result proofs like a delegation's,
// with kith's own calls (protocol.SignResultProof, VerifyResultProof).
func measureProof(n int) (ProofCost, error) {
	provider, err := crypto.GenerateIdentity()
	if err != nil {
		return ProofCost{}, fmt.Errorf("bench: proof probe: %w", err)
	}
	requester, err := crypto.GenerateIdentity()
	if err != nil {
		return ProofCost{}, fmt.Errorf("bench: proof probe: %w", err)
	}
	alg := protocol.FastestDigest()
	p := protocol.ResultProof{
		DelegationID: protocol.NewDelegationID(), Requester: requester.PeerID(), Provider: provider.PeerID(),
		Digest: alg, OfferHash: alg.Sum([]byte("offer")), TranscriptHash: alg.Sum([]byte("transcript")),
		Usage: protocol.Usage{Prompt: 16, Completion: 16, Total: 32}, State: protocol.StateCompleted,
		OutputHash: protocol.OutputDigest(alg, []protocol.Part{protocol.TextPart("output")}),
	}
	signs, verifies := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for range n {
		p.CompletedAt = time.Now()
		t0 := time.Now()
		a, err := protocol.SignResultProof(provider, p)
		t1 := time.Now()
		if err != nil {
			return ProofCost{}, fmt.Errorf("bench: proof probe: %w", err)
		}
		if _, err := protocol.VerifyResultProof(provider.PeerID(), a); err != nil {
			return ProofCost{}, fmt.Errorf("bench: proof probe: %w", err)
		}
		signs, verifies = append(signs, t1.Sub(t0)), append(verifies, time.Since(t1))
	}
	return ProofCost{Sign: summarise(signs), Verify: summarise(verifies)}, nil
}
