package protocol

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/protocol/pb"
)

// Provisional results (1.5): the offer's flag and the stored confirmation,
// pinned by golden vectors, and the confirmation's rules. The scan that
// reads the flag from a stored offer: offerscan_test.go.

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
