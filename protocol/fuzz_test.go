package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/protocol/pb"
)

// Fuzz targets for everything that parses bytes from the network. Each is
// seeded with the golden vectors and edge cases, and checks:
//   - no panic, and every failure matches ErrMalformed;
//   - a value that decodes re-encodes, decodes to an equal value, and
//     re-encodes to the same bytes (the encoder is canonical on decoded
//     values).
//
// Run one for a while with e.g.
//
//	go test ./protocol -run XXX -fuzz FuzzDecodeDelegationOffer -fuzztime 60s

var edgeSeeds = [][]byte{
	nil,
	{0x00},
	{0xff, 0xff, 0xff, 0xff},
	{0x0a, 0x00},             // field 1, empty
	{0x0a, 0x10},             // field 1, length past the end
	{0x08, 0x80, 0x80, 0x80}, // varint cut short
	bytes.Repeat([]byte{0x80}, 11),
}

// messageSeeds returns the encoded fixture messages.
func messageSeeds(tb testing.TB) map[MessageType][]byte {
	out := make(map[MessageType][]byte)
	for _, m := range fixtureMessages(tb) {
		b, err := EncodeMessage(m)
		if err != nil {
			tb.Fatal(err)
		}
		out[m.Type()] = b
	}
	return out
}

// innerBody strips the oneof wrapper: the bytes of the body message alone.
func innerBody(tb testing.TB, msg []byte) []byte {
	_, _, n := protowire.ConsumeTag(msg)
	body, m := protowire.ConsumeBytes(msg[n:])
	if n < 0 || m < 0 {
		tb.Fatalf("not a Message: %x", msg)
	}
	return body
}

// checkRoundTrip asserts the property every successful decode must have.
func checkRoundTrip(t *testing.T, m Message) {
	t.Helper()
	enc, err := EncodeMessage(m)
	if err != nil {
		t.Fatalf("decoded value does not re-encode: %v\n%+v", err, m)
	}
	m2, err := DecodeMessage(enc)
	if err != nil {
		t.Fatalf("re-encoded value does not decode: %v", err)
	}
	if !reflect.DeepEqual(m, m2) {
		t.Fatalf("round trip changed the value\n got %+v\nwant %+v", m2, m)
	}
	enc2, err := EncodeMessage(m2)
	if err != nil || !bytes.Equal(enc, enc2) {
		t.Fatalf("encoding is not stable: %v\n%x\n%x", err, enc, enc2)
	}
}

func checkDecodeErr(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("decode error %q does not match ErrMalformed", err)
	}
}

// fuzzBody decodes arbitrary bytes as the body of one message type (pb
// unmarshal, then the domain conversion), as a peer's frame would be.
func fuzzBody[W proto.Message](f *testing.F, typ MessageType, newW func() W, from func(W) (Message, error)) {
	f.Add(innerBody(f, messageSeeds(f)[typ]))
	for _, s := range edgeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		w := newW()
		if err := proto.Unmarshal(b, w); err != nil {
			return
		}
		m, err := from(w)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if m.Type() != typ {
			t.Fatalf("decoded a %v as %v", m.Type(), typ)
		}
		checkRoundTrip(t, m)
	})
}

func FuzzDecodeCapabilityQuery(f *testing.F) {
	fuzzBody(f, TypeCapabilityQuery, func() *pb.CapabilityQuery { return new(pb.CapabilityQuery) },
		func(w *pb.CapabilityQuery) (Message, error) { return capabilityQueryFromWire(w) })
}

func FuzzDecodeCapabilityResponse(f *testing.F) {
	fuzzBody(f, TypeCapabilityResponse, func() *pb.CapabilityResponse { return new(pb.CapabilityResponse) },
		func(w *pb.CapabilityResponse) (Message, error) { return capabilityResponseFromWire(w) })
}

func FuzzDecodeDelegationOffer(f *testing.F) {
	fuzzBody(f, TypeDelegationOffer, func() *pb.DelegationOffer { return new(pb.DelegationOffer) },
		func(w *pb.DelegationOffer) (Message, error) { return delegationOfferFromWire(w) })
}

func FuzzDecodeDelegationAccept(f *testing.F) {
	fuzzBody(f, TypeDelegationAccept, func() *pb.DelegationAccept { return new(pb.DelegationAccept) },
		func(w *pb.DelegationAccept) (Message, error) { return delegationAcceptFromWire(w) })
}

func FuzzDecodeDelegationReject(f *testing.F) {
	fuzzBody(f, TypeDelegationReject, func() *pb.DelegationReject { return new(pb.DelegationReject) },
		func(w *pb.DelegationReject) (Message, error) { return delegationRejectFromWire(w) })
}

func FuzzDecodeDelegationStatus(f *testing.F) {
	fuzzBody(f, TypeDelegationStatus, func() *pb.DelegationStatus { return new(pb.DelegationStatus) },
		func(w *pb.DelegationStatus) (Message, error) { return delegationStatusFromWire(w) })
}

func FuzzDecodeDelegationResult(f *testing.F) {
	fuzzBody(f, TypeDelegationResult, func() *pb.DelegationResult { return new(pb.DelegationResult) },
		func(w *pb.DelegationResult) (Message, error) { return delegationResultFromWire(w) })
}

func FuzzDecodeDelegationCancel(f *testing.F) {
	fuzzBody(f, TypeDelegationCancel, func() *pb.DelegationCancel { return new(pb.DelegationCancel) },
		func(w *pb.DelegationCancel) (Message, error) { return delegationCancelFromWire(w) })
}

func FuzzDecodeMessage(f *testing.F) {
	for _, b := range messageSeeds(f) {
		f.Add(b)
	}
	for _, s := range edgeSeeds {
		f.Add(s)
	}
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 9, protowire.BytesType), nil)) // unknown type
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		checkRoundTrip(t, m)
	})
}

func FuzzDecodeCapabilityAssertion(f *testing.F) {
	a := fixtureCapabilityAssertion(f)
	seed, err := EncodeCapabilityAssertion(a)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	for _, s := range edgeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeCapabilityAssertion(b)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		enc, err := EncodeCapabilityAssertion(a)
		if err != nil {
			t.Fatalf("decoded assertion does not re-encode: %v", err)
		}
		a2, err := DecodeCapabilityAssertion(enc)
		if err != nil || !reflect.DeepEqual(a, a2) {
			t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, a2, a)
		}
	})
}

func FuzzDecodeResultProof(f *testing.F) {
	seed, err := EncodeResultProof(fixtureResultProof(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	for _, s := range edgeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeResultProof(b)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		enc, err := EncodeResultProof(p)
		if err != nil {
			t.Fatalf("decoded proof does not re-encode: %v", err)
		}
		p2, err := DecodeResultProof(enc)
		if err != nil || !reflect.DeepEqual(p, p2) {
			t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, p2, p)
		}
	})
}

// FuzzFrameReader reads frames (cap fuzzFrameCap) until an error. The frames
// it returns, written back with FrameWriter, must give exactly the bytes it
// consumed: prefixes are canonical, nothing is skipped or invented. Reading
// through io.ByteReader, byte by byte and into one reused buffer
// (ReadFrameInto) must agree.
func FuzzFrameReader(f *testing.F) {
	const fuzzFrameCap = 1024
	seeds := messageSeeds(f)
	all := frameBytes(seeds[TypeDelegationOffer], seeds[TypeDelegationStatus], seeds[TypeDelegationResult])
	f.Add(all)
	f.Add(all[:len(all)-3])
	f.Add(frameBytes([]byte{}, []byte("x")))
	f.Add(binary.AppendUvarint(nil, fuzzFrameCap+1))
	f.Add(binary.AppendUvarint(nil, 1<<63))
	f.Add([]byte{0x80, 0x00})
	for _, s := range edgeSeeds {
		f.Add(s)
	}
	type outcome struct {
		frames   [][]byte
		consumed int
		err      error
	}
	read := func(t *testing.T, in []byte, byteAtATime, reuse bool) outcome {
		br := bytes.NewReader(in)
		var r io.Reader = br
		if byteAtATime {
			r = onlyReader{br}
		}
		fr := NewFrameReader(r, fuzzFrameCap)
		var o outcome
		var buf []byte
		for {
			var b []byte
			var err error
			if reuse {
				// One buffer for every frame: each is kept as a copy.
				if b, err = fr.ReadFrameInto(buf); b != nil {
					buf = b
					b = bytes.Clone(b)
				}
			} else {
				b, err = fr.ReadFrame()
			}
			if err != nil {
				o.err = err
				return o
			}
			if len(b) > fuzzFrameCap {
				t.Fatalf("frame of %d bytes above the cap", len(b))
			}
			o.frames = append(o.frames, b)
			o.consumed = len(in) - br.Len()
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		o := read(t, in, false, false)
		switch {
		case errors.Is(o.err, io.EOF):
			if o.consumed != len(in) {
				t.Fatalf("clean EOF after consuming %d of %d bytes", o.consumed, len(in))
			}
		case errors.Is(o.err, io.ErrUnexpectedEOF), errors.Is(o.err, ErrFrameTooLarge), errors.Is(o.err, ErrMalformed):
		default:
			t.Fatalf("unexpected error %v", o.err)
		}
		var out bytes.Buffer
		fw := NewFrameWriter(&out, fuzzFrameCap)
		for _, fr := range o.frames {
			if err := fw.WriteFrame(fr); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(out.Bytes(), in[:o.consumed]) {
			t.Fatalf("frames re-encode to %x, consumed %x", out.Bytes(), in[:o.consumed])
		}
		slow := read(t, in, true, false)
		if !reflect.DeepEqual(slow.frames, o.frames) || slow.consumed != o.consumed || slow.err.Error() != o.err.Error() {
			t.Fatalf("byte-at-a-time reading disagrees: %d frames, %v vs %d frames, %v", len(slow.frames), slow.err, len(o.frames), o.err)
		}
		reused := read(t, in, false, true)
		if !reflect.DeepEqual(reused.frames, o.frames) || reused.consumed != o.consumed || reused.err.Error() != o.err.Error() {
			t.Fatalf("reading into one buffer disagrees: %d frames, %v vs %d frames, %v", len(reused.frames), reused.err, len(o.frames), o.err)
		}
	})
}

// FuzzDecodeAdvert: gossip adverts arrive from any peer on the topic.
func FuzzDecodeAdvert(f *testing.F) {
	id := fixedIdentity(f, 2)
	signed, err := SignCapability(id, CapabilityAssertion{
		Profiles: []Profile{{Name: "echo"}}, Versions: Supported,
		IssuedAt: fixedTime, ExpiresAt: fixedTime.Add(10 * time.Minute),
	})
	if err != nil {
		f.Fatal(err)
	}
	good, err := EncodeAdvert(signed)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAdvert(b)
		if err != nil {
			return
		}
		again, err := EncodeAdvert(a)
		if err != nil {
			t.Fatalf("decoded advert does not encode: %v", err)
		}
		if _, err := DecodeAdvert(again); err != nil {
			t.Fatalf("re-encoded advert does not decode: %v", err)
		}
		_, _ = VerifyCapability(id.PeerID(), a, fixedTime.Add(time.Minute))
	})
}
