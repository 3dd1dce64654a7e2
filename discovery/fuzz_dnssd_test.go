package discovery

import (
	"context"
	"errors"
	"testing"

	"github.com/miekg/dns"
	ma "github.com/multiformats/go-multiaddr"
)

// FuzzDNSSDAnswer: whatever a DNS server answers goes through the whole
// of Lookup's answer processing (PTR, SRV, TXT, A/AAAA, _dnsaddr and its
// /dnsaddr/ indirection, CNAME chains). The fuzzer's bytes are one DNS
// message, served as the answer to every question Lookup asks. Nothing
// may panic, and whatever comes out must respect the caps.
func FuzzDNSSDAnswer(f *testing.F) {
	id := testPeer(f, 1)
	p := id.String()
	zone, err := ZoneRecords(Zone{Domain: "lab.test", TXT: TXT{Peer: id, Profiles: []string{"echo"}, Addrs: []ma.Multiaddr{
		ma.StringCast("/ip4/127.0.0.1/tcp/4001"), ma.StringCast("/ip6/::1/udp/4001/quic-v1"),
	}}})
	if err != nil {
		f.Fatal(err)
	}
	for _, records := range [][]string{
		zone,
		{
			"_kith-a2a._tcp.lab.test. SRV 0 0 4001 host.lab.test.",
			`_kith-a2a._tcp.lab.test. TXT "peer=` + p + `" "dnsaddr=/ip4/127.0.0.1/udp/1/quic-v1"`,
			"host.lab.test. A 127.0.0.1",
		},
		{
			`_dnsaddr.lab.test. TXT "dnsaddr=/dnsaddr/a.test/p2p/` + p + `"`,
			`_dnsaddr.a.test. TXT "dnsaddr=/dnsaddr/lab.test"`,
			`_dnsaddr.a.test. TXT "dnsaddr=/ip4/127.0.0.1/tcp/1/p2p/` + p + `"`,
			"_dnsaddr.lab.test. CNAME _dnsaddr.a.test.",
		},
		{`_kith-a2a._tcp.lab.test. PTR x._kith-a2a._tcp.lab.test.`, `x._kith-a2a._tcp.lab.test. TXT "peer=bad"`, "x._kith-a2a._tcp.lab.test. SRV 0 0 0 ."},
	} {
		m := new(dns.Msg)
		m.SetQuestion("_kith-a2a._tcp.lab.test.", dns.TypePTR)
		m.Response = true
		for _, line := range records {
			rr, err := dns.NewRR(line)
			if err != nil {
				f.Fatal(err)
			}
			m.Answer = append(m.Answer, rr)
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := new(dns.Msg)
		if m.Unpack(b) != nil {
			return
		}
		c := &Counters{}
		r, err := NewDNSSD(DNSSDConfig{Resolver: "127.0.0.1:53", Counters: c})
		if err != nil {
			t.Fatal(err)
		}
		hints, err := r.lookup(context.Background(), "lab.test.", "fuzz", func(context.Context, string, uint16) (*dns.Msg, error) {
			return m, nil
		})
		if err != nil {
			if !errors.Is(err, ErrResolver) && !errors.Is(err, ErrNoDomain) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(hints) > dnssdMaxPeers {
			t.Fatalf("%d hints, at most %d", len(hints), dnssdMaxPeers)
		}
		for _, h := range hints {
			if h.ID == "" || h.Source != SourceDNSSD || len(h.Addrs) == 0 || len(h.Addrs) > dnssdMaxAddrs {
				t.Fatalf("bad hint %+v", h)
			}
		}
	})
}
