package protocol

import (
	"bytes"
	"testing"
	"testing/cryptotest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

// sessionVectors are the bytes of an envelope session (protocol 1.2): a
// setup stream from identity 1 to identity 2 that offers a session, Bob's
// ack, then stream 1 of the session carrying the fixture offer one way and
// the fixture accept back.
type sessionVectors struct {
	offerHello, ack, hello, fwd, back []byte
}

func sessionFixture(t *testing.T) sessionVectors {
	t.Helper()
	cryptotest.SetGlobalRandom(t, 2026)
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	now := func() time.Time { return fixedTime }
	later := func() time.Time { return fixedTime.Add(time.Second) }
	replay := crypto.NewMemoryReplayCache(nil)
	var v sessionVectors
	ini, hello, err := crypto.Dial(alice, bob.PeerID(), crypto.DialParams{
		Type: uint32(TypeCapabilityQuery), TTL: time.Minute, Now: now,
		Rand: bytes.NewReader(bytes.Repeat([]byte{0x43}, 16)), Session: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	v.offerHello = hello
	res, err := crypto.Accept(bob, hello, crypto.AcceptParams{Remote: alice.PeerID(), Replay: replay, Now: later, Sessions: true})
	if err != nil {
		t.Fatal(err)
	}
	v.ack = res.Ack()
	if err := ini.Control(v.ack); err != nil {
		t.Fatal(err)
	}
	sini, shello, err := crypto.Dial(alice, bob.PeerID(), crypto.DialParams{
		Type: uint32(TypeDelegationOffer), TTL: time.Minute, Now: now,
		Rand: bytes.NewReader(bytes.Repeat([]byte{0x44}, 16)), Session: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !sini.InSession() {
		t.Fatal("second stream not in the session")
	}
	v.hello = shello
	offer, accept := fixtureEncoded(t, TypeDelegationOffer), fixtureEncoded(t, TypeDelegationAccept)
	if v.fwd, err = sini.Seal(offer); err != nil {
		t.Fatal(err)
	}
	sres, err := crypto.Accept(bob, shello, crypto.AcceptParams{Remote: alice.PeerID(), Replay: replay, Now: later, Sessions: true})
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := sres.Open(v.fwd); err != nil || !bytes.Equal(pt, offer) {
		t.Fatal("session frame does not open", err)
	}
	if v.back, err = sres.Seal(accept); err != nil {
		t.Fatal(err)
	}
	return v
}

func fixtureEncoded(t testing.TB, typ MessageType) []byte {
	t.Helper()
	for _, m := range fixtureMessages(t) {
		if m.Type() == typ {
			b, err := EncodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("no fixture %s", typ)
	return nil
}

func init() {
	envelopeVectors = append(envelopeVectors, []struct {
		name, comment string
		encode        func(t *testing.T) []byte
	}{
		{"envelope_session_offer_hello", "1.2 setup Hello offering a session (header version 1, session_offer = true), seed 0x01 to seed 0x02, issued 2026-11-21T12:00:00Z, ttl 1m, message id 0x43*16 (the session id), HPKE randomness cryptotest seed 2026",
			func(t *testing.T) []byte { return sessionFixture(t).offerHello }},
		{"envelope_session_ack", "the responder's session ack for envelope_session_offer_hello, a 16-byte control frame in the clear",
			func(t *testing.T) []byte { return sessionFixture(t).ack }},
		{"envelope_session_hello", "stream 1 of that session (header version 2, session_id 0x43*16, stream_seq 1, message id 0x44*16), HMAC-SHA256 under the session's hello key",
			func(t *testing.T) []byte { return sessionFixture(t).hello }},
		{"envelope_session_frame_opener", "first sealed frame opener->responder on the session stream (derived key): the delegation_offer vector",
			func(t *testing.T) []byte { return sessionFixture(t).fwd }},
		{"envelope_session_frame_responder", "first sealed frame responder->opener on the session stream (derived key): the delegation_accept vector",
			func(t *testing.T) []byte { return sessionFixture(t).back }},
	}...)
}

// The stored session vectors must still be accepted and open with the
// fixed keys, on a responder that holds only what the setup Hello gave it.
func TestGoldenSessionOpens(t *testing.T) {
	alice, bob := fixedIdentity(t, 1), fixedIdentity(t, 2)
	replay := crypto.NewMemoryReplayCache(nil)
	later := func() time.Time { return fixedTime.Add(time.Second) }
	res, err := crypto.Accept(bob, readGolden(t, "envelope_session_offer_hello"), crypto.AcceptParams{
		Remote: alice.PeerID(), Replay: replay, Now: later, Sessions: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(res.Ack(), readGolden(t, "envelope_session_ack")) {
		t.Fatal("ack differs from the vector")
	}
	sres, err := crypto.Accept(bob, readGolden(t, "envelope_session_hello"), crypto.AcceptParams{
		Remote: alice.PeerID(), Replay: replay, Now: later, Sessions: true})
	if err != nil {
		t.Fatal(err)
	}
	pt, err := sres.Open(readGolden(t, "envelope_session_frame_opener"))
	if err != nil || !bytes.Equal(pt, readGolden(t, "delegation_offer")) {
		t.Fatal("session frame does not open to the delegation_offer vector", err)
	}
	back, err := sres.Seal(readGolden(t, "delegation_accept"))
	if err != nil || !bytes.Equal(back, readGolden(t, "envelope_session_frame_responder")) {
		t.Fatal("responder's session frame differs from the vector", err)
	}
	// A 1.1 responder takes the offer Hello as a plain setup: the offer is
	// a signed field it does not know.
	old, err := crypto.Accept(fixedIdentity(t, 2), readGolden(t, "envelope_session_offer_hello"), crypto.AcceptParams{
		Remote: alice.PeerID(), Replay: crypto.NewMemoryReplayCache(nil), Now: later})
	if err != nil || old.Ack() != nil {
		t.Fatal("a 1.1 responder refused or acked the offer", err)
	}
}

// crypto writes the session fields by hand too: they must be the fields
// kith.proto declares, encoded as protobuf encodes them.
func TestSessionHeaderMatchesSchema(t *testing.T) {
	v := sessionFixture(t)
	for _, hello := range [][]byte{v.offerHello, v.hello} {
		hl, err := crypto.ParseHello(hello)
		if err != nil {
			t.Fatal(err)
		}
		var wh pb.Hello
		if err := proto.Unmarshal(hello, &wh); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wh.GetSignature(), hl.Signature) || !bytes.Equal(wh.GetMac(), hl.MAC) {
			t.Fatal("pb.Hello signature or mac differs from crypto.ParseHello")
		}
		h, err := crypto.ParseHeader(hl.Header)
		if err != nil {
			t.Fatal(err)
		}
		var w pb.EnvelopeHeader
		if err := proto.Unmarshal(hl.Header, &w); err != nil {
			t.Fatal(err)
		}
		if w.GetVersion() != h.Version || w.GetSessionOffer() != h.SessionOffer || w.GetStreamSeq() != h.StreamSeq ||
			(h.Version == crypto.SessionVersion && !bytes.Equal(w.GetSessionId(), h.SessionID[:])) {
			t.Fatalf("pb.EnvelopeHeader %v differs from crypto.Header %+v", &w, h)
		}
		again, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&w)
		if !bytes.Equal(again, hl.Header) {
			t.Fatalf("protobuf encodes the header differently:\nproto  %x\ncrypto %x", again, hl.Header)
		}
		againHello, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&wh)
		if !bytes.Equal(againHello, hello) {
			t.Fatal("protobuf encodes the Hello differently")
		}
	}
}
