package protocol

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/protocol/pb"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range fixtureMessages(t) {
		t.Run(m.Type().String(), func(t *testing.T) {
			b, err := EncodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeMessage(b)
			if err != nil {
				t.Fatal(err)
			}
			if got.Type() != m.Type() {
				t.Fatalf("type %v, want %v", got.Type(), m.Type())
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("round trip changed the message\n got %+v\nwant %+v", got, m)
			}
			again, err := EncodeMessage(got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("re-encoding is not stable:\n%x\n%x", again, b)
			}
		})
	}
}

// The smallest valid value of each type round-trips too: absent optional
// parts must come back absent, not as empty non-nil values.
func TestMessageRoundTripMinimal(t *testing.T) {
	id := fixtureDelegation
	msgs := []Message{
		&CapabilityQuery{},
		&DelegationOffer{ID: id, Profile: "echo"},
		&DelegationAccept{ID: id},
		&DelegationReject{ID: id, Reason: ReasonBusy},
		&DelegationStatus{ID: id, Query: true},
		&DelegationResult{ID: id, State: StateFailed},
		&DelegationCancel{ID: id},
	}
	for _, m := range msgs {
		t.Run(m.Type().String(), func(t *testing.T) {
			b, err := EncodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeMessage(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("got %+v, want %+v", got, m)
			}
		})
	}
}

// The oneof case numbers are the MessageType values that the envelope
// header carries; the first tag of an encoded Message says so.
func TestMessageCaseNumbersAreTypes(t *testing.T) {
	for _, m := range fixtureMessages(t) {
		b, err := EncodeMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || int(num) != int(m.Type()) {
			t.Errorf("%v: first field %d (wire type %d), want %d", m.Type(), num, typ, m.Type())
		}
	}
}

// The pb enums and the domain enums must list the same values in the same
// order: the conversion is a cast.
func TestEnumsMatchWire(t *testing.T) {
	check := func(kind, prefix string, names []string, wire map[int32]string) {
		t.Helper()
		if len(names) != len(wire) {
			t.Errorf("%s: %d domain values, %d wire values", kind, len(names), len(wire))
		}
		for i, n := range names {
			if want := prefix + strings.ToUpper(n); wire[int32(i)] != want {
				t.Errorf("%s %d: wire %q, want %q", kind, i, wire[int32(i)], want)
			}
		}
	}
	check("state", "STATE_", stateNames[:], pb.State_name)
	check("reject reason", "REJECT_REASON_", reasonNames[:], pb.RejectReason_name)
	check("trust level", "TRUST_", trustNames[:], pb.TrustLevel_name)
}

// fixtureWire returns the wire form of the fixture of type typ.
func fixtureWire(t *testing.T, typ MessageType) *pb.Message {
	t.Helper()
	w, err := messageToWire(fixtureMessages(t)[typ-1])
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func repeat(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func textParts(n int) []*pb.Part {
	out := make([]*pb.Part, n)
	for i := range out {
		out[i] = &pb.Part{Kind: &pb.Part_Text{Text: &pb.TextPart{Text: "x"}}}
	}
	return out
}

// mutation breaks one rule in the wire form of a fixture.
type mutation struct {
	typ MessageType
	f   func(*pb.Message)
}

func onOffer(f func(*pb.DelegationOffer)) mutation {
	return mutation{TypeDelegationOffer, func(m *pb.Message) { f(m.GetDelegationOffer()) }}
}

func onStatus(f func(*pb.DelegationStatus)) mutation {
	return mutation{TypeDelegationStatus, func(m *pb.Message) { f(m.GetDelegationStatus()) }}
}

func onResult(f func(*pb.DelegationResult)) mutation {
	return mutation{TypeDelegationResult, func(m *pb.Message) { f(m.GetDelegationResult()) }}
}

func onAccept(f func(*pb.DelegationAccept)) mutation {
	return mutation{TypeDelegationAccept, func(m *pb.Message) { f(m.GetDelegationAccept()) }}
}

func onReject(f func(*pb.DelegationReject)) mutation {
	return mutation{TypeDelegationReject, func(m *pb.Message) { f(m.GetDelegationReject()) }}
}

func onCancel(f func(*pb.DelegationCancel)) mutation {
	return mutation{TypeDelegationCancel, func(m *pb.Message) { f(m.GetDelegationCancel()) }}
}

func onQuery(f func(*pb.CapabilityQuery)) mutation {
	return mutation{TypeCapabilityQuery, func(m *pb.Message) { f(m.GetCapabilityQuery()) }}
}

func onResponse(f func(*pb.CapabilityResponse)) mutation {
	return mutation{TypeCapabilityResponse, func(m *pb.Message) { f(m.GetCapabilityResponse()) }}
}

// Every rule a decoder enforces, each broken once in an otherwise valid
// message. wantField is where the error must say the problem is.
func TestDecodeMessageRejects(t *testing.T) {
	_, _, relay := peers(t).ids()
	// In the offer fixture, parts are: 0 text, 1 data, 2 file with bytes,
	// 3 file with a URI.
	file := func(o *pb.DelegationOffer, i int) *pb.FilePart { return o.Task.Parts[i].GetFile() }
	unknownPart := &pb.Part{}
	unknownPart.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 9, protowire.BytesType), nil))
	cases := []struct {
		name      string
		mut       mutation
		wantIs    error // besides ErrMalformed
		wantField string
	}{
		{"offer id 15 bytes", onOffer(func(o *pb.DelegationOffer) { o.DelegationId = o.DelegationId[:15] }), ErrBadID, "delegation_offer.delegation_id"},
		{"offer id 17 bytes", onOffer(func(o *pb.DelegationOffer) { o.DelegationId = append(o.DelegationId, 1) }), ErrBadID, "delegation_offer.delegation_id"},
		{"offer id missing", onOffer(func(o *pb.DelegationOffer) { o.DelegationId = nil }), ErrBadID, "delegation_offer.delegation_id"},
		{"offer id all zero", onOffer(func(o *pb.DelegationOffer) { o.DelegationId = make([]byte, 16) }), ErrBadID, "delegation_offer.delegation_id"},
		{"offer parent 5 bytes", onOffer(func(o *pb.DelegationOffer) { o.ParentId = []byte{1, 2, 3, 4, 5} }), ErrBadID, "delegation_offer.parent_id"},
		{"offer parent is itself", onOffer(func(o *pb.DelegationOffer) { o.ParentId = o.DelegationId }), nil, "delegation_offer.parent_id"},
		{"offer profile empty", onOffer(func(o *pb.DelegationOffer) { o.Profile = "" }), nil, "delegation_offer.profile"},
		{"offer profile too long", onOffer(func(o *pb.DelegationOffer) { o.Profile = strings.Repeat("p", MaxProfileNameLen+1) }), nil, "delegation_offer.profile"},
		{"offer profile with space", onOffer(func(o *pb.DelegationOffer) { o.Profile = "sum marize" }), nil, "delegation_offer.profile"},
		{"offer profile with control character", onOffer(func(o *pb.DelegationOffer) { o.Profile = "echo\x1b[2J" }), nil, "delegation_offer.profile"},
		{"offer context id too long", onOffer(func(o *pb.DelegationOffer) { o.ContextId = strings.Repeat("c", MaxContextIDLen+1) }), nil, "delegation_offer.context_id"},
		{"offer hop limit too high", onOffer(func(o *pb.DelegationOffer) { o.HopLimit = MaxHopLimit + 1 }), nil, "delegation_offer.hop_limit"},
		{"offer chain too long", onOffer(func(o *pb.DelegationOffer) {
			o.Chain = nil
			for range MaxChain + 1 {
				o.Chain = append(o.Chain, []byte(relay))
			}
		}), nil, "delegation_offer.chain"},
		{"offer chain entry garbage", onOffer(func(o *pb.DelegationOffer) { o.Chain[1] = []byte("not a peer id") }), nil, "delegation_offer.chain[1]"},
		{"offer chain entry empty", onOffer(func(o *pb.DelegationOffer) { o.Chain[0] = nil }), nil, "delegation_offer.chain[0]"},
		// A well-formed identity multihash, just bigger than any Ed25519 ID.
		{"offer chain entry too long", onOffer(func(o *pb.DelegationOffer) { o.Chain[0] = append([]byte{0x00, 70}, make([]byte, 70)...) }), nil, "delegation_offer.chain[0]"},
		{"offer too many parts", onOffer(func(o *pb.DelegationOffer) { o.Task.Parts = textParts(MaxParts + 1) }), nil, "delegation_offer.task.parts"},
		{"offer role too long", onOffer(func(o *pb.DelegationOffer) { o.Task.Role = strings.Repeat("r", MaxRoleLen+1) }), nil, "delegation_offer.task.role"},
		{"offer part without kind", onOffer(func(o *pb.DelegationOffer) { o.Task.Parts[0] = &pb.Part{} }), nil, "delegation_offer.task.parts[0]"},
		{"offer part of unknown kind", onOffer(func(o *pb.DelegationOffer) { o.Task.Parts[0] = unknownPart }), ErrUnknownEnum, "delegation_offer.task.parts[0]"},
		{"offer data not json", onOffer(func(o *pb.DelegationOffer) { o.Task.Parts[1].GetData().Json = []byte(`{"a":`) }), nil, "delegation_offer.task.parts[1].data"},
		{"offer data json array", onOffer(func(o *pb.DelegationOffer) { o.Task.Parts[1].GetData().Json = []byte(`[1,2]`) }), nil, "delegation_offer.task.parts[1].data"},
		{"offer data two values", onOffer(func(o *pb.DelegationOffer) { o.Task.Parts[1].GetData().Json = []byte(`{} {}`) }), nil, "delegation_offer.task.parts[1].data"},
		{"offer data empty", onOffer(func(o *pb.DelegationOffer) { o.Task.Parts[1].GetData().Json = nil }), nil, "delegation_offer.task.parts[1].data"},
		{"offer file bytes and uri", onOffer(func(o *pb.DelegationOffer) { file(o, 2).Uri = "https://example.org/x" }), nil, "delegation_offer.task.parts[2].file.uri"},
		{"offer file uri too long", onOffer(func(o *pb.DelegationOffer) { file(o, 3).Uri = strings.Repeat("u", MaxURILen+1) }), nil, "delegation_offer.task.parts[3].file.uri"},
		{"offer file name too long", onOffer(func(o *pb.DelegationOffer) { file(o, 2).Name = strings.Repeat("n", MaxFileNameLen+1) }), nil, "delegation_offer.task.parts[2].file.name"},
		{"offer file media type too long", onOffer(func(o *pb.DelegationOffer) { file(o, 2).MediaType = strings.Repeat("m", MaxMediaTypeLen+1) }), nil, "delegation_offer.task.parts[2].file.media_type"},
		{"accept handle too long", onAccept(func(a *pb.DelegationAccept) { a.ProviderHandle = strings.Repeat("h", MaxHandleLen+1) }), nil, "delegation_accept.provider_handle"},
		{"accept device too long", onAccept(func(a *pb.DelegationAccept) { a.Lease.Device = strings.Repeat("d", MaxDeviceLen+1) }), nil, "delegation_accept.lease.device"},
		{"offer proof digest unknown", onOffer(func(o *pb.DelegationOffer) { o.ProofDigest = 2 }), ErrUnknownEnum, "delegation_offer.proof_digest"},
		{"reject reason unknown", onReject(func(r *pb.DelegationReject) { r.Reason = 99 }), ErrUnknownEnum, "delegation_reject.reason"},
		{"reject reason negative", onReject(func(r *pb.DelegationReject) { r.Reason = -1 }), ErrUnknownEnum, "delegation_reject.reason"},
		{"reject reason unspecified", onReject(func(r *pb.DelegationReject) { r.Reason = pb.RejectReason_REJECT_REASON_UNSPECIFIED }), nil, "delegation_reject.reason"},
		{"reject detail too long", onReject(func(r *pb.DelegationReject) { r.Detail = strings.Repeat("d", MaxReasonLen+1) }), nil, "delegation_reject.detail"},
		{"status state unknown", onStatus(func(s *pb.DelegationStatus) { s.State = 11 }), ErrUnknownEnum, "delegation_status.state"},
		{"status progress above 1000", onStatus(func(s *pb.DelegationStatus) { s.ProgressPermille = MaxProgressPermille + 1 }), nil, "delegation_status.progress_permille"},
		{"status query with state", onStatus(func(s *pb.DelegationStatus) { s.Query = true }), nil, "delegation_status.query"},
		{"status too many partial parts", onStatus(func(s *pb.DelegationStatus) { s.Partial = textParts(MaxParts + 1) }), nil, "delegation_status.partial"},
		{"result state not terminal", onResult(func(r *pb.DelegationResult) { r.State = pb.State_STATE_RUNNING }), nil, "delegation_result.state"},
		{"result state unknown", onResult(func(r *pb.DelegationResult) { r.State = 12 }), ErrUnknownEnum, "delegation_result.state"},
		{"result proof short signature", onResult(func(r *pb.DelegationResult) { r.Proof.Signature = r.Proof.Signature[:63] }), nil, "delegation_result.proof"},
		{"result proof without payload", onResult(func(r *pb.DelegationResult) { r.Proof.Payload = nil }), nil, "delegation_result.proof"},
		{"result too many output parts", onResult(func(r *pb.DelegationResult) { r.Output = textParts(MaxParts + 1) }), nil, "delegation_result.output"},
		{"result reason too long", onResult(func(r *pb.DelegationResult) { r.Reason = strings.Repeat("r", MaxReasonLen+1) }), nil, "delegation_result.reason"},
		{"cancel id missing", onCancel(func(c *pb.DelegationCancel) { c.DelegationId = nil }), ErrBadID, "delegation_cancel.delegation_id"},
		{"cancel reason too long", onCancel(func(c *pb.DelegationCancel) { c.Reason = strings.Repeat("r", MaxReasonLen+1) }), nil, "delegation_cancel.reason"},
		{"query bad version", onQuery(func(q *pb.CapabilityQuery) { q.Versions[1] = "1" }), nil, "capability_query.versions[1]"},
		{"query version leading zero", onQuery(func(q *pb.CapabilityQuery) { q.Versions[0] = "01.0" }), nil, "capability_query.versions[0]"},
		{"query version out of range", onQuery(func(q *pb.CapabilityQuery) { q.Versions[0] = "1.65536" }), nil, "capability_query.versions[0]"},
		{"query too many versions", onQuery(func(q *pb.CapabilityQuery) { q.Versions = repeat(MaxVersions+1, "1.0") }), nil, "capability_query.versions"},
		{"query empty profile name", onQuery(func(q *pb.CapabilityQuery) { q.Profiles[0] = "" }), nil, "capability_query.profiles[0]"},
		{"query too many profiles", onQuery(func(q *pb.CapabilityQuery) { q.Profiles = repeat(MaxProfiles+1, "p") }), nil, "capability_query.profiles"},
		{"response without assertion", onResponse(func(r *pb.CapabilityResponse) { r.Assertion = nil }), nil, "capability_response.assertion"},
		{"response short signature", onResponse(func(r *pb.CapabilityResponse) { r.Assertion.Signature = []byte{1} }), nil, "capability_response.assertion"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := fixtureWire(t, c.mut.typ)
			c.mut.f(w)
			b, err := proto.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodeMessage(b)
			checkErr(t, err, c.wantIs, c.wantField)
		})
	}
}

// proto.Marshal refuses invalid UTF-8 in strings, so this case is written by
// hand: a peer's encoder need not be so polite.
func TestDecodeMessageRejectsInvalidUTF8(t *testing.T) {
	w := fixtureWire(t, TypeDelegationOffer)
	o := w.GetDelegationOffer()
	o.Profile = ""
	inner, err := proto.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	inner = protowire.AppendString(protowire.AppendTag(inner, 2, protowire.BytesType), "\xff")
	b := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), inner)
	_, err = DecodeMessage(b)
	checkErr(t, err, nil, "message")
}

func checkErr(t *testing.T, err, wantIs error, wantField string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted; want an error")
	}
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("error %q is not ErrMalformed", err)
	}
	if wantIs != nil && !errors.Is(err, wantIs) {
		t.Errorf("error %q is not %v", err, wantIs)
	}
	if !strings.Contains(err.Error(), wantField+":") {
		t.Errorf("error %q does not name field %q", err, wantField)
	}
}

func TestDecodeMessageRejectsFraming(t *testing.T) {
	unknownBody := protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), []byte{0x08, 0x01})
	cases := []struct {
		name   string
		b      []byte
		wantIs error
	}{
		{"empty", nil, nil},
		{"garbage", []byte{0xff, 0xff, 0xff}, nil},
		{"truncated", []byte{0x1a, 0x10, 0x0a}, nil},
		{"unknown body", unknownBody, ErrUnknownEnum},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeMessage(c.b)
			if err == nil || m != nil {
				t.Fatalf("got %v, %v; want an error", m, err)
			}
			checkErr(t, err, c.wantIs, "message")
		})
	}
	// A chunk is framing that Conn joins; on its own it is no message.
	chunk := protowire.AppendBytes(protowire.AppendTag(nil, 9, protowire.BytesType), []byte{0x08, 0x01})
	if m, err := DecodeMessage(chunk); err == nil || m != nil {
		t.Fatalf("lone chunk: got %v, %v; want an error", m, err)
	} else {
		checkErr(t, err, nil, "chunk")
	}
}

// Unknown fields inside a known message are what newer minor versions add:
// they are ignored, not refused.
func TestDecodeMessageIgnoresUnknownFields(t *testing.T) {
	w := fixtureWire(t, TypeDelegationCancel)
	c := w.GetDelegationCancel()
	c.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7))
	b, err := proto.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, fixtureMessages(t)[TypeDelegationCancel-1]) {
		t.Fatalf("got %+v", m)
	}
}

// Encoders refuse what decoders would refuse, so kith never sends a
// message its peers must drop.
func TestEncodeMessageRejects(t *testing.T) {
	id := fixtureDelegation
	cases := []struct {
		name      string
		m         Message
		wantField string
	}{
		{"nil", nil, "message"},
		{"typed nil", (*DelegationOffer)(nil), "delegation_offer"},
		{"zero id", &DelegationCancel{}, "delegation_cancel.delegation_id"},
		{"text part with data", &DelegationOffer{ID: id, Profile: "echo", Task: Task{Parts: []Part{{Kind: PartText, Text: "a", Data: []byte("{}")}}}}, "delegation_offer.task.parts[0].text"},
		{"part without kind", &DelegationOffer{ID: id, Profile: "echo", Task: Task{Parts: []Part{{Text: "a"}}}}, "delegation_offer.task.parts[0].kind"},
		{"negative timeout", &DelegationOffer{ID: id, Profile: "echo", Timeout: -time.Second}, "delegation_offer.timeout_ms"},
		{"timeout above 49 days", &DelegationOffer{ID: id, Profile: "echo", Timeout: 50 * 24 * time.Hour}, "delegation_offer.timeout_ms"},
		{"chain entry not a peer", &DelegationOffer{ID: id, Profile: "echo", Chain: []peer.ID{"junk"}}, "delegation_offer.chain[0]"},
		{"own parent", &DelegationOffer{ID: id, Profile: "echo", ParentID: id}, "delegation_offer.parent_id"},
		{"reject unspecified", &DelegationReject{ID: id}, "delegation_reject.reason"},
		{"reject unknown reason", &DelegationReject{ID: id, Reason: 200}, "delegation_reject.reason"},
		{"status query with state", &DelegationStatus{ID: id, Query: true, State: StateRunning}, "delegation_status.query"},
		{"status unknown state", &DelegationStatus{ID: id, State: 42}, "delegation_status.state"},
		{"result not terminal", &DelegationResult{ID: id, State: StateRunning}, "delegation_result.state"},
		{"result negative duration", &DelegationResult{ID: id, State: StateCompleted, Duration: -1}, "delegation_result.duration_ms"},
		{"response empty", &CapabilityResponse{}, "capability_response.assertion"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := EncodeMessage(c.m)
			if b != nil {
				t.Errorf("returned %d bytes alongside the error", len(b))
			}
			checkErr(t, err, nil, c.wantField)
		})
	}
}
