package protocol

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/zeebo/blake3"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/protocol/pb"
)

// Multi-turn delegations (1.3): the new wire forms, pinned by golden
// vectors, and the rules that keep a continuation from passing for an
// offer.

func fixtureContinue() *DelegationContinue {
	return &DelegationContinue{ID: fixtureDelegation, Turn: 2, Task: Task{Role: "user", Parts: []Part{TextPart("Use British spelling.")}}}
}

func fixtureMultiTurn(tb testing.TB) []struct {
	name string
	m    Message
} {
	offer := fixtureMessages(tb)[TypeDelegationOffer-1].(*DelegationOffer)
	offer.MultiTurn = true
	return []struct {
		name string
		m    Message
	}{
		{"delegation_offer_multi_turn", offer},
		{"delegation_continue", fixtureContinue()},
		{"delegation_status_input_required", &DelegationStatus{
			ID: fixtureDelegation, State: StateInputRequired, Seq: 9, Turn: 1,
			Partial: []Part{TextPart("American or British spelling?")},
			Usage:   Usage{Prompt: 40, Completion: 12, Total: 52},
		}},
	}
}

func TestGoldenMultiTurn(t *testing.T) {
	checkGoldenMessages(t, fixtureMultiTurn(t), "protocol 1.3")
	t.Run("result_proof_turns", func(t *testing.T) {
		p := fixtureResultProof(t)
		p.Turns = 3
		p.OutputHash = OutputDigest(p.Digest, []Part{TextPart("the answer after three turns")}) // every 1.3 proof binds its output
		checkGoldenProof(t, "result_proof_turns", "three turns and the output digest, protocol 1.3", p)
	})
}

// TestContinueIsNotAnOffer: a continuation decodes as DelegationContinue,
// never as DelegationOffer, and a peer that ignores the turn field (1.2 and
// older, which do not know it) refuses it as malformed rather than take it
// for a fresh offer.
func TestContinueIsNotAnOffer(t *testing.T) {
	b, err := EncodeMessage(fixtureContinue())
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*DelegationContinue); !ok {
		t.Fatalf("decoded a continuation as %T", m)
	}
	// What an old peer sees: the same bytes with the unknown field gone.
	var w pb.Message
	if err := proto.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	w.GetDelegationOffer().Turn = 0
	if _, err := delegationOfferFromWire(w.GetDelegationOffer()); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a continuation without its turn decoded as an offer (err %v)", err)
	}
}

func TestContinueRules(t *testing.T) {
	offerField := func(set func(*pb.DelegationOffer)) func(*pb.DelegationOffer) { return set }
	cases := map[string]func(*pb.DelegationOffer){
		"profile":       offerField(func(w *pb.DelegationOffer) { w.Profile = "echo" }),
		"budget_tokens": offerField(func(w *pb.DelegationOffer) { w.BudgetTokens = 10 }),
		"timeout_ms":    offerField(func(w *pb.DelegationOffer) { w.TimeoutMs = 1000 }),
		"hop_limit":     offerField(func(w *pb.DelegationOffer) { w.HopLimit = 1 }),
		"multi_turn":    offerField(func(w *pb.DelegationOffer) { w.MultiTurn = true }),
		"proof_digest":  offerField(func(w *pb.DelegationOffer) { w.ProofDigest = pb.ProofDigest_PROOF_DIGEST_BLAKE3 }),
		"turn 1":        offerField(func(w *pb.DelegationOffer) { w.Turn = 1 }),
		"turn too high": offerField(func(w *pb.DelegationOffer) { w.Turn = MaxTurns + 1 }),
		"no answer":     offerField(func(w *pb.DelegationOffer) { w.Task = nil }),
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			w, err := fixtureContinue().toWire()
			if err != nil {
				t.Fatal(err)
			}
			mutate(w)
			b, err := proto.Marshal(&pb.Message{Body: &pb.Message_DelegationOffer{DelegationOffer: w}})
			if err != nil {
				t.Fatal(err)
			}
			if m, err := DecodeMessage(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("decoded %+v (err %v), want ErrMalformed", m, err)
			}
		})
	}
	if _, err := EncodeMessage(&DelegationContinue{ID: fixtureDelegation, Turn: 2}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("encoded a continuation without an answer: %v", err)
	}
	if _, err := EncodeMessage(&DelegationStatus{ID: fixtureDelegation, Query: true, Turn: 2}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("encoded a status query with a turn: %v", err)
	}
}

func TestSpeaks(t *testing.T) {
	if Speaks([]Version{{1, 0}, {1, 2}}, MultiTurn) {
		t.Error("a 1.2 peer speaks multi-turn")
	}
	if !Speaks([]Version{{1, 3}}, MultiTurn) || !Speaks(Supported, MultiTurn) {
		t.Error("a 1.3 peer does not speak multi-turn")
	}
	if Speaks([]Version{{2, 0}}, MultiTurn) {
		t.Error("another major speaks 1.3")
	}
}

func FuzzDecodeDelegationContinue(f *testing.F) {
	b, err := EncodeMessage(fixtureContinue())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(innerBody(f, b))
	f.Add(innerBody(f, messageSeeds(f)[TypeDelegationOffer]))
	for _, s := range edgeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var w pb.DelegationOffer
		if err := proto.Unmarshal(b, &w); err != nil {
			return
		}
		m, err := delegationContinueFromWire(&w)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		checkRoundTrip(t, m)
	})
}

// OutputDigest frames every part, so outputs that concatenate to the same
// bytes, or hold the same bytes in another kind of part, differ.
func TestOutputDigestFraming(t *testing.T) {
	outputs := [][]Part{
		nil,
		{TextPart("")},
		{TextPart("abc")},
		{TextPart("ab"), TextPart("c")},
		{TextPart("a"), TextPart("bc")},
		{DataPart([]byte("abc"))},
		{FilePart(File{Name: "abc"})},
		{FilePart(File{MediaType: "abc"})},
		{FilePart(File{Bytes: []byte("abc")})},
		{FilePart(File{URI: "abc"})},
	}
	for _, alg := range []ProofDigest{DigestSHA256, DigestBLAKE3} {
		seen := map[[32]byte]int{}
		for i, o := range outputs {
			d := OutputDigest(alg, o)
			if j, dup := seen[d]; dup {
				t.Errorf("%s: outputs %d and %d have the same digest", alg, j, i)
			}
			seen[d] = i
			if OutputDigest(alg, o) != d {
				t.Errorf("%s: output %d: digest not deterministic", alg, i)
			}
		}
	}
}

// OutputDigest is the framing its comment gives, byte for byte: each part
// its kind, then each field as a uvarint length and the bytes, hashed with
// the digest asked for. A text longer than any buffer it might go through
// is hashed whole.
func TestOutputDigestFrames(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 1000) + "tail"
	parts := []Part{TextPart(long), DataPart([]byte("xyz")), TextPart("")}
	var want []byte
	want = append(want, byte(PartText))
	want = binary.AppendUvarint(want, uint64(len(long)))
	want = append(want, long...)
	want = append(want, byte(PartData))
	want = binary.AppendUvarint(want, 3)
	want = append(want, "xyz"...)
	want = append(want, byte(PartText), 0)
	if got := OutputDigest(DigestSHA256, parts); got != sha256.Sum256(want) {
		t.Fatalf("digest %x, want %x (SHA-256 of the framed parts)", got, sha256.Sum256(want))
	}
	if got := OutputDigest(DigestBLAKE3, parts); got != blake3.Sum256(want) {
		t.Fatalf("digest %x, want %x (BLAKE3 of the framed parts)", got, blake3.Sum256(want))
	}
}
