package protocol

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol/pb"
)

func TestSignVerifyCapability(t *testing.T) {
	p := peers(t)
	want := fixtureCapabilityAssertion(t)
	signed, err := SignCapability(p.provider, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyCapability(p.provider.PeerID(), signed, want.IssuedAt.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}

	unsigned := want
	unsigned.Provider = ""
	filled, err := SignCapability(p.provider, unsigned)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyCapability(p.provider.PeerID(), filled, want.IssuedAt); err != nil {
		t.Fatalf("provider filled in from the identity: %v", err)
	}
}

func TestVerifyCapabilityRejects(t *testing.T) {
	p := peers(t)
	a := fixtureCapabilityAssertion(t)
	now := a.IssuedAt.Add(time.Minute)
	signed, err := SignCapability(p.provider, a)
	if err != nil {
		t.Fatal(err)
	}
	// An assertion about the provider, signed by someone else.
	payload, err := EncodeCapabilityAssertion(a)
	if err != nil {
		t.Fatal(err)
	}
	forged := p.relay.SignAssertion(crypto.DomainCapabilityAssertion, payload)
	tampered := crypto.Assertion{Payload: append([]byte(nil), signed.Payload...), Signature: signed.Signature}
	tampered.Payload[len(tampered.Payload)-1] ^= 1
	// A signature over a result proof must not pass as a capability.
	otherDomain := p.provider.SignAssertion(crypto.DomainResultProof, signed.Payload)
	garbage := p.provider.SignAssertion(crypto.DomainCapabilityAssertion, []byte{0xff, 0xff})

	cases := []struct {
		name   string
		signer *crypto.Identity
		a      crypto.Assertion
		now    time.Time
		wantIs error
	}{
		{"wrong signer", p.relay, signed, now, crypto.ErrBadSignature},
		{"about someone else", p.relay, forged, now, ErrPeerMismatch},
		{"tampered payload", p.provider, tampered, now, crypto.ErrBadSignature},
		{"other domain", p.provider, otherDomain, now, crypto.ErrBadSignature},
		{"signed garbage", p.provider, garbage, now, ErrMalformed},
		{"expired exactly", p.provider, signed, a.ExpiresAt, ErrExpired},
		{"expired", p.provider, signed, a.ExpiresAt.Add(time.Hour), ErrExpired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := VerifyCapability(c.signer.PeerID(), c.a, c.now)
			if !errors.Is(err, c.wantIs) {
				t.Fatalf("got %v, want %v", err, c.wantIs)
			}
		})
	}

	if _, err := SignCapability(p.relay, a); !errors.Is(err, ErrPeerMismatch) {
		t.Fatalf("signing an assertion about another peer: got %v, want ErrPeerMismatch", err)
	}
}

func TestSignVerifyResultProof(t *testing.T) {
	p := peers(t)
	want := fixtureResultProof(t)
	signed, err := SignResultProof(p.provider, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyResultProof(p.provider.PeerID(), signed)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}

	payload, err := EncodeResultProof(want)
	if err != nil {
		t.Fatal(err)
	}
	forged := p.relay.SignAssertion(crypto.DomainResultProof, payload)
	otherDomain := p.provider.SignAssertion(crypto.DomainCapabilityAssertion, payload)
	cases := []struct {
		name   string
		signer *crypto.Identity
		a      crypto.Assertion
		wantIs error
	}{
		{"wrong signer", p.relay, signed, crypto.ErrBadSignature},
		{"about someone else", p.relay, forged, ErrPeerMismatch},
		{"other domain", p.provider, otherDomain, crypto.ErrBadSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := VerifyResultProof(c.signer.PeerID(), c.a); !errors.Is(err, c.wantIs) {
				t.Fatalf("got %v, want %v", err, c.wantIs)
			}
		})
	}
	if _, err := SignResultProof(p.relay, want); !errors.Is(err, ErrPeerMismatch) {
		t.Fatalf("signing a proof naming another provider: got %v, want ErrPeerMismatch", err)
	}
}

func TestDecodeCapabilityAssertionRejects(t *testing.T) {
	cases := []struct {
		name      string
		mutate    func(*pb.CapabilityAssertion)
		wantIs    error
		wantField string
	}{
		{"provider missing", func(a *pb.CapabilityAssertion) { a.Provider = nil }, nil, "provider"},
		{"provider garbage", func(a *pb.CapabilityAssertion) { a.Provider = []byte{1, 2, 3} }, nil, "provider"},
		{"no versions", func(a *pb.CapabilityAssertion) { a.Versions = nil }, nil, "versions"},
		{"bad version", func(a *pb.CapabilityAssertion) { a.Versions = []string{"v1"} }, nil, "versions[0]"},
		{"unknown trust", func(a *pb.CapabilityAssertion) { a.GrantedTrust = 3 }, ErrUnknownEnum, "granted_trust"},
		{"no expiry", func(a *pb.CapabilityAssertion) { a.ExpiresAtUnixMs = 0 }, nil, "expires_at"},
		{"no issue time", func(a *pb.CapabilityAssertion) { a.IssuedAtUnixMs = 0 }, nil, "expires_at"},
		{"expires before issued", func(a *pb.CapabilityAssertion) { a.ExpiresAtUnixMs = a.IssuedAtUnixMs - 1 }, nil, "expires_at"},
		{"duplicate profile", func(a *pb.CapabilityAssertion) { a.Profiles[1].Name = a.Profiles[0].Name }, nil, "profiles[1]"},
		{"profile without name", func(a *pb.CapabilityAssertion) { a.Profiles[0].Name = "" }, nil, "profiles[0].name"},
		{"description too long", func(a *pb.CapabilityAssertion) {
			a.Profiles[0].Description = strings.Repeat("d", MaxDescriptionLen+1)
		}, nil, "profiles[0].description"},
		{"too many skills", func(a *pb.CapabilityAssertion) { a.Profiles[0].Skills = repeat(MaxSkills+1, "s") }, nil, "profiles[0].skills"},
		{"empty skill", func(a *pb.CapabilityAssertion) { a.Profiles[0].Skills[1] = "" }, nil, "profiles[0].skills[1]"},
		{"skill too long", func(a *pb.CapabilityAssertion) {
			a.Profiles[0].Skills[0] = strings.Repeat("s", MaxSkillLen+1)
		}, nil, "profiles[0].skills[0]"},
		{"too many profiles", func(a *pb.CapabilityAssertion) {
			a.Profiles = nil
			for range MaxProfiles + 1 {
				a.Profiles = append(a.Profiles, &pb.Profile{Name: "p"})
			}
		}, nil, "profiles"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := fixtureCapabilityAssertion(t) // fresh: the wire form shares its slices
			w, err := a.toWire()
			if err != nil {
				t.Fatal(err)
			}
			c.mutate(w)
			b, err := proto.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodeCapabilityAssertion(b)
			checkErr(t, err, c.wantIs, "capability_assertion."+c.wantField)
		})
	}
}

func TestDecodeResultProofRejects(t *testing.T) {
	cases := []struct {
		name      string
		mutate    func(*pb.ResultProof)
		wantIs    error
		wantField string
	}{
		{"delegation id short", func(p *pb.ResultProof) { p.DelegationId = p.DelegationId[:8] }, ErrBadID, "delegation_id"},
		{"requester missing", func(p *pb.ResultProof) { p.Requester = nil }, nil, "requester"},
		{"provider garbage", func(p *pb.ResultProof) { p.Provider = []byte("x") }, nil, "provider"},
		{"offer digest short", func(p *pb.ResultProof) { p.OfferSha256 = p.OfferSha256[:31] }, nil, "offer_sha256"},
		{"transcript digest missing", func(p *pb.ResultProof) { p.TranscriptSha256 = nil }, nil, "transcript_sha256"},
		{"output digest long", func(p *pb.ResultProof) { p.OutputSha256 = make([]byte, 33) }, nil, "output_sha256"},
		{"not terminal", func(p *pb.ResultProof) { p.State = pb.State_STATE_ACCEPTED }, nil, "state"},
		{"unknown state", func(p *pb.ResultProof) { p.State = 40 }, ErrUnknownEnum, "state"},
		{"unknown digest", func(p *pb.ResultProof) { p.Digest = 2 }, ErrUnknownEnum, "digest"},
		{"negative digest", func(p *pb.ResultProof) { p.Digest = -1 }, ErrUnknownEnum, "digest"},
		{"no completion time", func(p *pb.ResultProof) { p.CompletedAtUnixMs = 0 }, nil, "completed_at_unix_ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rp := fixtureResultProof(t)
			w, err := rp.toWire()
			if err != nil {
				t.Fatal(err)
			}
			c.mutate(w)
			b, err := proto.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodeResultProof(b)
			checkErr(t, err, c.wantIs, "result_proof."+c.wantField)
		})
	}
}

func TestCheckProfileName(t *testing.T) {
	for _, ok := range []string{"echo", "summarize-8b", "llama3.1:8b", "résumé", strings.Repeat("p", MaxProfileNameLen)} {
		if err := CheckProfileName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", " echo", "echo\n", "a\tb", "\u200b", strings.Repeat("p", MaxProfileNameLen+1)} {
		if err := CheckProfileName(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: got %v, want ErrMalformed", bad, err)
		}
	}
}
