package protocol

import (
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

// ResultProof is what a provider signs about a finished delegation. The
// requester verifies it before marking the delegation completed, and anyone
// holding the record can verify it again later.
type ResultProof struct {
	DelegationID DelegationID
	Requester    peer.ID
	Provider     peer.ID // the signer
	// Digest (1.6) is the hash of OfferHash, TranscriptHash and
	// OutputHash: SHA-256 unless the offer asked for another
	// (DelegationOffer.ProofDigest) and the provider agreed.
	Digest         ProofDigest
	OfferHash      [32]byte // Digest of the offer frame's plaintext
	TranscriptHash [32]byte // Digest over every frame's plaintext, in order
	Usage          Usage
	CompletedAt    time.Time
	State          State // terminal
	// Turns (1.3) is how many turns a multi-turn delegation took; 0 for
	// one that took one. The transcript then covers every continuation.
	Turns uint32
	// OutputHash (1.3) is OutputDigest of the result's output; zero
	// from a provider that speaks no 1.3, whose proofs bind only the
	// output it streamed (in the transcript).
	OutputHash [32]byte
}

func (p *ResultProof) check() error {
	if err := checkDelegationID("delegation_id", p.DelegationID); err != nil {
		return err
	}
	if err := checkPeer("requester", p.Requester); err != nil {
		return err
	}
	if err := checkPeer("provider", p.Provider); err != nil {
		return err
	}
	if p.CompletedAt.IsZero() {
		return invalid("completed_at_unix_ms", "missing")
	}
	if err := checkState("state", p.State); err != nil {
		return err
	}
	if !p.State.Terminal() {
		return invalid("state", "%s is not a terminal state", p.State)
	}
	if p.Turns == 1 || p.Turns > MaxTurns {
		return invalid("turns", "%d; 0 for one turn, else 2..%d", p.Turns, MaxTurns)
	}
	return checkDigest("digest", p.Digest)
}

func (p *ResultProof) toWire() (*pb.ResultProof, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	return &pb.ResultProof{
		DelegationId:      p.DelegationID[:],
		Requester:         []byte(p.Requester),
		Provider:          []byte(p.Provider),
		OfferSha256:       p.OfferHash[:],
		TranscriptSha256:  p.TranscriptHash[:],
		Usage:             usageToWire(p.Usage),
		CompletedAtUnixMs: timeToWire(p.CompletedAt),
		State:             stateToWire(p.State),
		Turns:             p.Turns,
		OutputSha256:      optionalDigest(p.OutputHash),
		Digest:            digestToWire(p.Digest),
	}, nil
}

func resultProofFromWire(w *pb.ResultProof) (*ResultProof, error) {
	id, err := delegationIDFromWire("delegation_id", w.GetDelegationId())
	if err != nil {
		return nil, err
	}
	requester, err := peerFromWire("requester", w.GetRequester())
	if err != nil {
		return nil, err
	}
	provider, err := peerFromWire("provider", w.GetProvider())
	if err != nil {
		return nil, err
	}
	offer, err := digestFromWire("offer_sha256", w.GetOfferSha256())
	if err != nil {
		return nil, err
	}
	transcript, err := digestFromWire("transcript_sha256", w.GetTranscriptSha256())
	if err != nil {
		return nil, err
	}
	state, err := stateFromWire("state", w.GetState())
	if err != nil {
		return nil, err
	}
	alg, err := digestFromWireEnum("digest", w.GetDigest())
	if err != nil {
		return nil, err
	}
	var output [32]byte
	if b := w.GetOutputSha256(); len(b) > 0 {
		if output, err = digestFromWire("output_sha256", b); err != nil {
			return nil, err
		}
	}
	p := &ResultProof{
		DelegationID:   id,
		Requester:      requester,
		Provider:       provider,
		Digest:         alg,
		OfferHash:      offer,
		TranscriptHash: transcript,
		Usage:          usageFromWire(w.GetUsage()),
		CompletedAt:    timeFromWire(w.GetCompletedAtUnixMs()),
		State:          state,
		Turns:          w.GetTurns(),
		OutputHash:     output,
	}
	return p, p.check()
}

// optionalDigest is d on the wire, or nothing for the zero digest.
func optionalDigest(d [32]byte) []byte {
	if d == ([32]byte{}) {
		return nil
	}
	return d[:]
}

// OutputDigest is what a 1.3 result proof signs of a result's output:
// the digest d (SHA-256 before 1.6) over every part in order, each framed
// as its kind and then its fields, every field length-prefixed (uvarint),
// so that no two different outputs frame the same. It is computed from
// the parts, not from their encoding, so both sides reach it from what
// they hold.
func OutputDigest(d ProofDigest, parts []Part) [32]byte {
	h := d.Start()
	var n [binary.MaxVarintLen64]byte
	field := func(b []byte) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(b)))])
		h.Write(b)
	}
	// A text goes in as it is: the hash only reads what it is given and
	// keeps none of it, so the string's own memory serves (converting a
	// megabyte of output to []byte would copy all of it, and so did a
	// small buffer a piece at a time).
	text := func(s string) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
	}
	for _, p := range parts {
		h.Write([]byte{byte(p.Kind)})
		switch p.Kind {
		case PartText:
			text(p.Text)
		case PartData:
			field(p.Data)
		case PartFile:
			text(p.File.Name)
			text(p.File.MediaType)
			field(p.File.Bytes)
			text(p.File.URI)
		}
	}
	return h.Finish()
}

func digestFromWire(name string, b []byte) ([32]byte, error) {
	if len(b) != 32 {
		return [32]byte{}, invalid(name, "%d bytes, want 32", len(b))
	}
	return [32]byte(b), nil
}

// EncodeResultProof encodes p as the payload that SignResultProof signs.
func EncodeResultProof(p ResultProof) ([]byte, error) {
	w, err := p.toWire()
	if err != nil {
		return nil, within("result_proof", err)
	}
	return marshal(w)
}

// DecodeResultProof decodes a payload without checking any signature; use
// VerifyResultProof for bytes from the network.
func DecodeResultProof(b []byte) (ResultProof, error) {
	var w pb.ResultProof
	if err := unmarshal("result_proof", b, &w); err != nil {
		return ResultProof{}, err
	}
	p, err := resultProofFromWire(&w)
	if err != nil {
		return ResultProof{}, within("result_proof", err)
	}
	return *p, nil
}

// SignResultProof encodes p and signs it with id under
// crypto.DomainResultProof. An empty p.Provider is filled in with id's peer
// ID; any other peer is ErrPeerMismatch.
func SignResultProof(id *crypto.Identity, p ResultProof) (crypto.Assertion, error) {
	if p.Provider == "" {
		p.Provider = id.PeerID()
	}
	if p.Provider != id.PeerID() {
		return crypto.Assertion{}, fmt.Errorf("%w: provider %s, signer %s", ErrPeerMismatch, p.Provider, id.PeerID())
	}
	payload, err := EncodeResultProof(p)
	if err != nil {
		return crypto.Assertion{}, err
	}
	return id.SignAssertion(crypto.DomainResultProof, payload), nil
}

// VerifyResultProof checks that signer signed exactly a.Payload, decodes it,
// and checks that the proof names signer as its provider (ErrPeerMismatch).
// Proofs do not expire: a record stays verifiable. Comparing the proof with
// the delegation it claims to prove (ID, requester, digests, usage) is the
// caller's job.
func VerifyResultProof(signer peer.ID, a crypto.Assertion) (ResultProof, error) {
	if err := crypto.VerifyAssertion(signer, crypto.DomainResultProof, a); err != nil {
		return ResultProof{}, fmt.Errorf("protocol: result proof from %s: %w", signer, err)
	}
	p, err := DecodeResultProof(a.Payload)
	if err != nil {
		return ResultProof{}, err
	}
	if p.Provider != signer {
		return ResultProof{}, fmt.Errorf("%w: proof names provider %s, signed by %s", ErrPeerMismatch, p.Provider, signer)
	}
	return p, nil
}
