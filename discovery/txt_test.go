package discovery

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/crypto"
)

func testPeer(tb testing.TB, seed byte) peer.ID {
	tb.Helper()
	id, err := crypto.IdentityFromSeed(bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		tb.Fatal(err)
	}
	return id.PeerID()
}

func TestTXTRoundTrip(t *testing.T) {
	id := testPeer(t, 1)
	var profiles []string
	for i := range 30 {
		profiles = append(profiles, strings.Repeat(string(rune('a'+i%26)), 20)+"-"+string(rune('a'+i/26)))
	}
	in := TXT{
		Peer:     id,
		Profiles: profiles,
		Addrs:    []ma.Multiaddr{ma.StringCast("/ip4/192.168.1.2/tcp/4001"), ma.StringCast("/ip4/192.168.1.2/udp/4001/quic-v1")},
	}
	ss := in.Strings()
	for _, s := range ss {
		if len(s) > 255 {
			t.Fatalf("string of %d bytes: %q", len(s), s)
		}
	}
	if n := len(ss); n < 5 {
		t.Fatalf("30 long profile names should need several profiles= strings; got %d strings", n)
	}
	out, err := ParseTXT(ss)
	if err != nil {
		t.Fatal(err)
	}
	if out.Peer != id || !slices.Equal(out.Profiles, profiles) || len(out.Addrs) != 2 || !out.Addrs[1].Equal(in.Addrs[1]) {
		t.Fatalf("round trip: got %+v, want %+v", out, in)
	}
}

func TestParseTXTRejects(t *testing.T) {
	id, other := testPeer(t, 1), testPeer(t, 2)
	for name, ss := range map[string][]string{
		"no peer":              {"profiles=echo"},
		"bad peer":             {"peer=notapeer"},
		"two peers":            {"peer=" + id.String(), "peer=" + other.String()},
		"bad profile":          {"peer=" + id.String(), "profiles=has space"},
		"empty profile":        {"peer=" + id.String(), "profiles=a,,b"},
		"bad addr":             {"peer=" + id.String(), "dnsaddr=/ip4/999.1.1.1/tcp/1"},
		"addr of another peer": {"peer=" + id.String(), "dnsaddr=/ip4/1.2.3.4/tcp/1/p2p/" + other.String()},
		"only p2p":             {"peer=" + id.String(), "dnsaddr=/p2p/" + id.String()},
		"oversized string":     {"peer=" + id.String(), "x=" + strings.Repeat("y", 300)},
		"too many strings":     slices.Repeat([]string{"peer=" + id.String()}, 65),
	} {
		if _, err := ParseTXT(ss); !errors.Is(err, ErrBadTXT) {
			t.Errorf("%s: got %v, want ErrBadTXT", name, err)
		}
	}
	// Bare attributes and unknown keys are ignored; an address with our own
	// /p2p/ suffix is accepted without it.
	got, err := ParseTXT([]string{"flag", "v=9", "peer=" + id.String(), "dnsaddr=/ip4/1.2.3.4/tcp/1/p2p/" + id.String()})
	if err != nil || got.Peer != id || len(got.Addrs) != 1 || got.Addrs[0].String() != "/ip4/1.2.3.4/tcp/1" {
		t.Fatalf("got %+v, %v", got, err)
	}
}
