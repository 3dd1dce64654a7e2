package protocol

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/protocol/pb"
)

// Provisional results (1.5): the offer's flag and the stored confirmation,
// pinned by golden vectors; the confirmation's rules; and the scan that
// reads the flag from a stored offer.

func fixtureProvisional(tb testing.TB) []struct {
	name string
	m    Message
} {
	offer := fixtureMessages(tb)[TypeDelegationOffer-1].(*DelegationOffer)
	offer.ProvisionalResult = true
	return []struct {
		name string
		m    Message
	}{
		{"delegation_offer_provisional", offer},
		{"delegation_status_stored", &DelegationStatus{ID: fixtureDelegation, State: StateCompleted, Seq: 4, Stored: true}},
	}
}

func TestGoldenProvisional(t *testing.T) {
	checkGoldenMessages(t, fixtureProvisional(t), "protocol 1.5")
}

// checkGoldenMessages pins each message's encoding to its golden vector,
// and checks that the vector decodes back to the message.
func checkGoldenMessages(t *testing.T, cases []struct {
	name string
	m    Message
}, version string) {
	t.Helper()
	for _, v := range cases {
		t.Run(v.name, func(t *testing.T) {
			b, err := EncodeMessage(v.m)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, v.name, "EncodeMessage of the "+v.name+" fixture ("+version+")", b)
			got, err := DecodeMessage(readGolden(t, v.name))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, v.m) {
				t.Errorf("decoded golden vector differs from the fixture\n got %+v\nwant %+v", got, v.m)
			}
		})
	}
}

// TestStoredRules: a stored confirmation carries the result's terminal
// state, its ID and seq, and nothing else; a continuation cannot ask for
// provisional results.
func TestStoredRules(t *testing.T) {
	base := DelegationStatus{ID: fixtureDelegation, State: StateCompleted, Seq: 4, Stored: true}
	for name, mutate := range map[string]func(*DelegationStatus){
		"not terminal": func(s *DelegationStatus) { s.State = StateRunning },
		"query":        func(s *DelegationStatus) { s.Query = true },
		"partial":      func(s *DelegationStatus) { s.Partial = []Part{TextPart("more")} },
		"progress":     func(s *DelegationStatus) { s.ProgressPermille = 10 },
		"turn":         func(s *DelegationStatus) { s.Turn = 1 },
		"usage":        func(s *DelegationStatus) { s.Usage = Usage{Total: 1} },
		"reason":       func(s *DelegationStatus) { s.Reason = "why" },
	} {
		t.Run(name, func(t *testing.T) {
			s := base
			mutate(&s)
			if _, err := EncodeMessage(&s); !errors.Is(err, ErrMalformed) {
				t.Fatalf("encoded %+v (err %v), want ErrMalformed", s, err)
			}
			// And from the wire: the same status built past the encoder.
			s.Stored = false
			w, err := s.toWire()
			if err != nil {
				t.Skipf("not encodable even without stored: %v", err)
			}
			w.Stored = true
			b, err := proto.Marshal(&pb.Message{Body: &pb.Message_DelegationStatus{DelegationStatus: w}})
			if err != nil {
				t.Fatal(err)
			}
			if m, err := DecodeMessage(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("decoded %+v (err %v), want ErrMalformed", m, err)
			}
		})
	}
	w, err := fixtureContinue().toWire()
	if err != nil {
		t.Fatal(err)
	}
	w.ProvisionalResult = true
	b, err := proto.Marshal(&pb.Message{Body: &pb.Message_DelegationOffer{DelegationOffer: w}})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := DecodeMessage(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a continuation asking for provisional results decoded: %+v (err %v)", m, err)
	}
}

// TestOfferAsksProvisional: the scan agrees with DecodeMessage on offers
// with and without the flag, large ones, and encodings protobuf merges
// (the offer or the flag given twice, the last one winning; the offer
// replaced by another member of the oneof).
func TestOfferAsksProvisional(t *testing.T) {
	offer := fixtureMessages(t)[TypeDelegationOffer-1].(*DelegationOffer)
	enc := func(o *DelegationOffer) []byte {
		b, err := EncodeMessage(o)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain := enc(offer)
	asking := *offer
	asking.ProvisionalResult = true
	large := asking
	large.Task = Task{Role: "user", Parts: []Part{TextPart(string(make([]byte, 3<<20)))}}
	flagOff := protowire.AppendVarint(protowire.AppendTag(nil, offerProvisionalField, protowire.VarintType), 0)
	wrap := func(body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, messageOfferField, protowire.BytesType), body)
	}
	status, err := EncodeMessage(&DelegationStatus{ID: fixtureDelegation, State: StateRunning, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"plain":                 plain,
		"asking":                enc(&asking),
		"large, asking":         enc(&large),
		"flag then cleared":     append(enc(&asking), wrap(flagOff)...),
		"offer merged, flagged": append(slices.Clone(plain), enc(&asking)...),
		"replaced by a status":  append(enc(&asking), status...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := DecodeMessage(b)
			if err != nil {
				t.Fatalf("the case does not decode: %v", err)
			}
			want := false // not an offer
			if o, ok := m.(*DelegationOffer); ok {
				want = o.ProvisionalResult
			}
			if got := OfferAsksProvisional(b); got != want {
				t.Fatalf("OfferAsksProvisional = %v, DecodeMessage says %v", got, want)
			}
		})
	}
	if !OfferAsksProvisional(enc(&large)) || OfferAsksProvisional(plain) {
		t.Fatal("the scan does not read the flag")
	}
}

// FuzzOfferAsksProvisional: on any input DecodeMessage decodes as an
// offer, the scan reports that offer's flag; on any input, it does not
// panic.
func FuzzOfferAsksProvisional(f *testing.F) {
	for _, v := range fixtureProvisional(f) {
		b, err := EncodeMessage(v.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range messageSeeds(f) {
		f.Add(b)
	}
	for _, s := range edgeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := OfferAsksProvisional(b)
		m, err := DecodeMessage(b)
		if err != nil {
			return
		}
		if o, ok := m.(*DelegationOffer); ok && got != o.ProvisionalResult {
			t.Fatalf("OfferAsksProvisional = %v, the decoded offer says %v", got, o.ProvisionalResult)
		}
	})
}
