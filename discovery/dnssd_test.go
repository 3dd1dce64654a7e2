package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/miekg/dns"
	ma "github.com/multiformats/go-multiaddr"
)

// testDNS is an authoritative DNS server for the zone "test." on
// 127.0.0.1, over UDP and TCP on one port. It truncates UDP answers to the
// size the query allows, as a real server does.
type testDNS struct {
	addr string

	mu      sync.Mutex
	rrs     []dns.RR
	rcode   map[string]int // "name type" -> forced rcode
	queries []string       // "net name type", in order
}

func startDNS(t *testing.T, records ...string) *testDNS {
	t.Helper()
	s := &testDNS{rcode: map[string]int{}}
	s.add(t, records...)
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no port free for both UDP and TCP")
	}
	s.addr = pc.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: s}, {Listener: ln, Handler: s}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() {
			_ = srv.Shutdown()
			<-done
		})
	}
	return s
}

func (s *testDNS) add(t testing.TB, records ...string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, line := range records {
		rr, err := dns.NewRR(line)
		if err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		if rr != nil {
			s.rrs = append(s.rrs, rr)
		}
	}
}

func (s *testDNS) force(name string, qtype uint16, rcode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rcode[dns.CanonicalName(name)+" "+dns.TypeToString[qtype]] = rcode
}

func (s *testDNS) log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.queries)
}

func (s *testDNS) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	network := w.LocalAddr().Network()
	if len(req.Question) == 1 {
		q := req.Question[0]
		name := dns.CanonicalName(q.Name)
		s.mu.Lock()
		s.queries = append(s.queries, network+" "+name+" "+dns.TypeToString[q.Qtype])
		if rc, ok := s.rcode[name+" "+dns.TypeToString[q.Qtype]]; ok {
			m.Rcode = rc
		} else {
			exists := false
			for _, rr := range s.rrs {
				if dns.IsSubDomain(name, dns.CanonicalName(rr.Header().Name)) {
					exists = true // the name, or an empty non-terminal above a name
				}
			}
			// Answer as a recursive resolver does: the CNAME chain, then
			// the records at its end.
			for target, hops := name, 0; target != "" && hops < 8; hops++ {
				next := ""
				for _, rr := range s.rrs {
					h := rr.Header()
					if dns.CanonicalName(h.Name) != target {
						continue
					}
					if h.Rrtype == q.Qtype {
						m.Answer = append(m.Answer, rr)
					} else if c, ok := rr.(*dns.CNAME); ok {
						m.Answer = append(m.Answer, rr)
						next = dns.CanonicalName(c.Target)
					}
				}
				target = next
			}
			switch {
			case !dns.IsSubDomain("test.", name):
				m.Rcode = dns.RcodeRefused
			case !exists:
				m.Rcode = dns.RcodeNameError
			}
		}
		s.mu.Unlock()
	}
	size := dns.MaxMsgSize
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(opt.UDPSize(), false)
		if network == "udp" {
			size = int(opt.UDPSize())
		}
	} else if network == "udp" {
		size = dns.MinMsgSize
	}
	m.Truncate(size)
	_ = w.WriteMsg(m)
}

func newTestDNSSD(t *testing.T, server string) (*DNSSD, *Counters) {
	t.Helper()
	c := &Counters{}
	r, err := NewDNSSD(DNSSDConfig{Resolver: server, Timeout: 5 * time.Second, Counters: c})
	if err != nil {
		t.Fatal(err)
	}
	return r, c
}

func mas(ss ...string) []ma.Multiaddr {
	out := make([]ma.Multiaddr, len(ss))
	for i, s := range ss {
		out[i] = ma.StringCast(s)
	}
	return out
}

// sameAddrs compares address sets, ignoring order.
func sameAddrs(got, want []ma.Multiaddr) bool {
	g, w := make([]string, len(got)), make([]string, len(want))
	for i, a := range got {
		g[i] = a.String()
	}
	for i, a := range want {
		w[i] = a.String()
	}
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

func zoneLines(t *testing.T, z Zone) []string {
	t.Helper()
	lines, err := ZoneRecords(z)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

func hintFor(hints []Hint, id peer.ID) (Hint, bool) {
	for _, h := range hints {
		if h.ID == id {
			return h, true
		}
	}
	return Hint{}, false
}

func TestZoneRecordsLayout(t *testing.T) {
	id := testPeer(t, 1)
	z := Zone{
		Domain: "Lab.Test",
		TXT: TXT{Peer: id, Profiles: []string{"echo", "llm"}, Addrs: mas(
			"/ip4/192.0.2.7/tcp/4001", "/ip4/192.0.2.7/udp/4001/quic-v1", "/ip6/2001:db8::7/tcp/4001",
		)},
	}
	lines := zoneLines(t, z)
	label := DefaultLabel(id)
	if !strings.HasPrefix(label, "kith-") || len(label) != 13 || label == "kith-12d3koow" {
		t.Fatalf("default label %q", label)
	}
	inst := label + "._kith-a2a._tcp.lab.test."
	want := []string{
		"_kith-a2a._tcp.lab.test.\t300\tIN\tPTR\t" + inst,
		inst + "\t300\tIN\tSRV\t0 0 4001 " + label + ".lab.test.",
		inst + "\t300\tIN\tTXT\t\"peer=" + id.String() + "\" \"profiles=echo,llm\"",
		label + ".lab.test.\t300\tIN\tA\t192.0.2.7",
		label + ".lab.test.\t300\tIN\tAAAA\t2001:db8::7",
		"_dnsaddr.lab.test.\t300\tIN\tTXT\t\"dnsaddr=/ip4/192.0.2.7/tcp/4001/p2p/" + id.String() + "\"",
		"_dnsaddr.lab.test.\t300\tIN\tTXT\t\"dnsaddr=/ip4/192.0.2.7/udp/4001/quic-v1/p2p/" + id.String() + "\"",
		"_dnsaddr.lab.test.\t300\tIN\tTXT\t\"dnsaddr=/ip6/2001:db8::7/tcp/4001/p2p/" + id.String() + "\"",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("records:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	// Every line is a record a zone parser reads back as itself.
	for _, line := range lines {
		rr, err := dns.NewRR(line)
		if err != nil || rr == nil {
			t.Fatalf("line %q does not parse: %v", line, err)
		}
		if rr.String() != line {
			t.Fatalf("line %q parses as %q", line, rr.String())
		}
	}

	// Names given explicitly, with characters a zone file must escape.
	lines = zoneLines(t, Zone{Domain: "lab.test.", Instance: "GPU box (attic)", Host: "nas.other.test.", TTL: 60, TXT: z.TXT})
	rr, err := dns.NewRR(lines[0])
	if err != nil {
		t.Fatal(err)
	}
	if p := rr.(*dns.PTR).Ptr; p != `GPU\ box\ \(attic\)._kith-a2a._tcp.lab.test.` || rr.Header().Ttl != 60 {
		t.Fatalf("PTR %q", lines[0])
	}
	if !strings.HasSuffix(lines[1], "SRV\t0 0 4001 nas.other.test.") {
		t.Fatalf("SRV %q", lines[1])
	}

	for name, bad := range map[string]Zone{
		"no domain":      {TXT: z.TXT},
		"bad domain":     {Domain: "a..b", TXT: z.TXT},
		"no peer":        {Domain: "lab.test", TXT: TXT{Addrs: z.TXT.Addrs}},
		"no addrs":       {Domain: "lab.test", TXT: TXT{Peer: id}},
		"dotted inst":    {Domain: "lab.test", Instance: "a.b", TXT: z.TXT},
		"long inst":      {Domain: "lab.test", Instance: strings.Repeat("x", 64), TXT: z.TXT},
		"bad host":       {Domain: "lab.test", Host: "-nas", TXT: z.TXT},
		"host with dots": {Domain: "lab.test", Host: "a.b", TXT: z.TXT},
	} {
		if _, err := ZoneRecords(bad); err == nil {
			t.Errorf("%s: ZoneRecords accepted %+v", name, bad)
		}
	}
}

// The records ZoneRecords writes, served by a DNS server, come back from
// Lookup as the node's addresses and profiles; two nodes under one domain
// stay apart.
func TestDNSSDRoundTrip(t *testing.T) {
	a, b := testPeer(t, 1), testPeer(t, 2)
	za := Zone{Domain: "lab.test", TXT: TXT{Peer: a, Profiles: []string{"echo"}, Addrs: mas(
		"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1", "/ip6/::1/tcp/4001",
	)}}
	zb := Zone{Domain: "lab.test", Instance: "second", Host: "other", TXT: TXT{Peer: b, Profiles: []string{"llm", "echo"}, Addrs: mas(
		"/ip4/127.0.0.2/tcp/5001", "/ip4/127.0.0.2/tcp/5002",
	)}}
	s := startDNS(t, append(zoneLines(t, za), zoneLines(t, zb)...)...)
	r, c := newTestDNSSD(t, s.addr)
	hints, err := r.Lookup(t.Context(), "lab.test")
	if err != nil {
		t.Fatal(err)
	}
	if len(hints) != 2 {
		t.Fatalf("got %d hints, want 2: %+v", len(hints), hints)
	}
	for _, z := range []Zone{za, zb} {
		h, ok := hintFor(hints, z.TXT.Peer)
		if !ok {
			t.Fatalf("no hint for %s", z.TXT.Peer)
		}
		if h.Source != SourceDNSSD || !slices.Equal(h.Profiles, z.TXT.Profiles) || !sameAddrs(h.Addrs, z.TXT.Addrs) {
			t.Errorf("hint %+v, want addrs %v profiles %v", h, z.TXT.Addrs, z.TXT.Profiles)
		}
	}
	if snap := c.Snapshot(); len(snap) != 0 {
		t.Errorf("clean zone dropped input: %v", snap)
	}
}

// Each layout on its own finds the peer: PTR-based DNS-SD without
// _dnsaddr, SRV+TXT directly at the service name, _dnsaddr alone, and
// /dnsaddr/ indirection.
func TestDNSSDLayouts(t *testing.T) {
	id := testPeer(t, 1)
	p := id.String()
	for _, tc := range []struct {
		name     string
		records  []string
		addrs    []string
		profiles []string
	}{{
		name: "dns-sd",
		records: []string{
			"_kith-a2a._tcp.lab.test. PTR node._kith-a2a._tcp.lab.test.",
			"node._kith-a2a._tcp.lab.test. SRV 0 0 4001 host.lab.test.",
			`node._kith-a2a._tcp.lab.test. TXT "peer=` + p + `" "profiles=echo"`,
			"host.lab.test. A 127.0.0.1",
		},
		addrs:    []string{"/ip4/127.0.0.1/tcp/4001"},
		profiles: []string{"echo"},
	}, {
		name: "srv and txt at the service name",
		records: []string{
			"_kith-a2a._tcp.lab.test. SRV 0 0 4001 host.lab.test.",
			`_kith-a2a._tcp.lab.test. TXT "peer=` + p + `" "profiles=echo" "dnsaddr=/ip4/127.0.0.1/udp/4001/quic-v1"`,
			"host.lab.test. AAAA ::1",
		},
		addrs:    []string{"/ip6/::1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"},
		profiles: []string{"echo"},
	}, {
		name:    "dnsaddr only",
		records: []string{`_dnsaddr.lab.test. TXT "dnsaddr=/ip4/127.0.0.1/tcp/4001/p2p/` + p + `"`},
		addrs:   []string{"/ip4/127.0.0.1/tcp/4001"},
	}, {
		name: "dnsaddr indirection, three hops",
		records: []string{
			`_dnsaddr.lab.test. TXT "dnsaddr=/dnsaddr/one.test/p2p/` + p + `"`,
			`_dnsaddr.one.test. TXT "dnsaddr=/dnsaddr/two.test"`,
			`_dnsaddr.two.test. TXT "dnsaddr=/dnsaddr/three.test"`,
			`_dnsaddr.three.test. TXT "dnsaddr=/ip4/127.0.0.1/tcp/4001/p2p/` + p + `"`,
		},
		addrs: []string{"/ip4/127.0.0.1/tcp/4001"},
	}, {
		name: "CNAME to the records",
		records: []string{
			"_dnsaddr.lab.test. CNAME _dnsaddr.elsewhere.test.",
			`_dnsaddr.elsewhere.test. TXT "dnsaddr=/ip4/127.0.0.1/tcp/4001/p2p/` + p + `"`,
		},
		addrs: []string{"/ip4/127.0.0.1/tcp/4001"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startDNS(t, tc.records...)
			r, c := newTestDNSSD(t, s.addr)
			hints, err := r.Lookup(t.Context(), "lab.test")
			if err != nil {
				t.Fatal(err)
			}
			if len(hints) != 1 || hints[0].ID != id || !sameAddrs(hints[0].Addrs, mas(tc.addrs...)) || !slices.Equal(hints[0].Profiles, tc.profiles) {
				t.Fatalf("hints %+v, want %s at %v with %v", hints, id, tc.addrs, tc.profiles)
			}
			if snap := c.Snapshot(); len(snap) != 0 {
				t.Errorf("dropped input: %v", snap)
			}
		})
	}
}

// Bad records are dropped, each counted under its reason, and the good
// peer published beside them is still found.
func TestDNSSDBadInput(t *testing.T) {
	// third is never published: a record that yields it speaks for it
	// without the right.
	good, other, third, fourth := testPeer(t, 1), testPeer(t, 2), testPeer(t, 3), testPeer(t, 4)
	o, th := other.String(), third.String()
	goodRecords := zoneLines(t, Zone{Domain: "lab.test", Instance: "good", Host: "good", TXT: TXT{Peer: good, Profiles: []string{"echo"}, Addrs: mas("/ip4/127.0.0.1/tcp/4001")}})
	var manyAddrs, manyPTR []string
	for i := range dnssdMaxAddrs + 5 {
		manyAddrs = append(manyAddrs, fmt.Sprintf(`_dnsaddr.lab.test. TXT "dnsaddr=/ip4/10.0.0.%d/tcp/1/p2p/%s"`, i+1, o))
	}
	for i := range dnssdMaxInstances + 1 {
		manyPTR = append(manyPTR, fmt.Sprintf("_kith-a2a._tcp.lab.test. PTR i%d._kith-a2a._tcp.lab.test.", i))
	}
	// Instances that cost more queries than a lookup may send: the
	// records at the domain itself (the good peer's _dnsaddr) still count.
	var costly []string
	for i := range dnssdMaxInstances {
		inst := fmt.Sprintf("c%d._kith-a2a._tcp.lab.test.", i)
		costly = append(costly, "_kith-a2a._tcp.lab.test. PTR "+inst, inst+` TXT "peer=`+o+`"`)
		for j := range dnssdMaxSRV {
			costly = append(costly, fmt.Sprintf("%s SRV 0 0 1 t%d-%d.lab.test.", inst, i, j))
		}
	}
	for _, tc := range []struct {
		reason  string
		records []string
		rcode   map[string]int // "name type" -> rcode the server answers
		want    int            // hints expected, the good one included
	}{
		{reason: "bad_txt", records: []string{
			"_kith-a2a._tcp.lab.test. PTR bad._kith-a2a._tcp.lab.test.",
			`bad._kith-a2a._tcp.lab.test. TXT "peer=notapeer"`,
			"bad._kith-a2a._tcp.lab.test. SRV 0 0 1 good.lab.test.",
		}, want: 1},
		{reason: "bad_txt", records: []string{
			`_kith-a2a._tcp.lab.test. TXT "v=spf1 -all"`,
		}, want: 1},
		{reason: "no_txt", records: []string{
			"_kith-a2a._tcp.lab.test. PTR bare._kith-a2a._tcp.lab.test.",
			"bare._kith-a2a._tcp.lab.test. SRV 0 0 1 good.lab.test.",
		}, want: 1},
		{reason: "bad_ptr", records: []string{
			"_kith-a2a._tcp.lab.test. PTR somewhere.else.test.",
		}, want: 1},
		{reason: "srv_nowhere", records: []string{
			"_kith-a2a._tcp.lab.test. PTR lost._kith-a2a._tcp.lab.test.",
			"lost._kith-a2a._tcp.lab.test. SRV 0 0 4001 missing.lab.test.",
			`lost._kith-a2a._tcp.lab.test. TXT "peer=` + o + `"`,
		}, want: 1},
		{reason: "srv_nowhere", records: []string{
			"_kith-a2a._tcp.lab.test. PTR off._kith-a2a._tcp.lab.test.",
			"off._kith-a2a._tcp.lab.test. SRV 0 0 0 .",
			`off._kith-a2a._tcp.lab.test. TXT "peer=` + o + `" "dnsaddr=/ip4/10.0.0.1/tcp/1"`,
		}, want: 2},
		{reason: "unpaired_srv", records: []string{
			"_kith-a2a._tcp.lab.test. SRV 0 0 4001 good.lab.test.",
			`_kith-a2a._tcp.lab.test. TXT "peer=` + o + `" "dnsaddr=/ip4/10.0.0.1/tcp/1"`,
			`_kith-a2a._tcp.lab.test. TXT "peer=` + fourth.String() + `" "dnsaddr=/ip4/10.0.0.2/tcp/1"`,
		}, want: 3},
		{reason: "bad_dnsaddr", records: []string{`_dnsaddr.lab.test. TXT "dnsaddr=not a multiaddr"`}, want: 1},
		{reason: "bad_dnsaddr", records: []string{`_dnsaddr.lab.test. TXT "dnsaddr=/ip4/10.0.0.1/tcp/1"`}, want: 1},
		{reason: "bad_dnsaddr", records: []string{`_dnsaddr.lab.test. TXT "dnsaddr=/dnsaddr/x.test/tcp/1"`}, want: 1},
		{reason: "bad_dnsaddr", records: []string{
			`_dnsaddr.lab.test. TXT "dnsaddr=/dnsaddr/x.test/p2p/` + o + `"`,
			`_dnsaddr.x.test. TXT "dnsaddr=/ip4/10.0.0.1/tcp/1/p2p/` + th + `"`,
		}, want: 1},
		{reason: "too_deep", records: []string{
			`_dnsaddr.lab.test. TXT "dnsaddr=/dnsaddr/d1.test"`,
			`_dnsaddr.d1.test. TXT "dnsaddr=/dnsaddr/d2.test"`,
			`_dnsaddr.d2.test. TXT "dnsaddr=/dnsaddr/d3.test"`,
			`_dnsaddr.d3.test. TXT "dnsaddr=/dnsaddr/d4.test"`,
			`_dnsaddr.d4.test. TXT "dnsaddr=/ip4/10.0.0.1/tcp/1/p2p/` + o + `"`,
		}, want: 1},
		{reason: "too_deep", records: []string{
			`_dnsaddr.lab.test. TXT "dnsaddr=/dnsaddr/loop.test"`,
			`_dnsaddr.loop.test. TXT "dnsaddr=/dnsaddr/lab.test"`,
		}, want: 1},
		{reason: "too_many", records: manyAddrs, want: 2},
		{reason: "too_many", records: manyPTR, want: 1},
		{reason: "too_many", records: costly, want: 1},
		{reason: "dns_error", records: []string{
			"_kith-a2a._tcp.lab.test. PTR broken._kith-a2a._tcp.lab.test.",
		}, rcode: map[string]int{"broken._kith-a2a._tcp.lab.test. TXT": dns.RcodeServerFailure}, want: 1},
		{reason: "dns_error", records: []string{
			`_dnsaddr.lab.test. TXT "dnsaddr=/dnsaddr/refused.test"`,
		}, rcode: map[string]int{"_dnsaddr.refused.test. TXT": dns.RcodeRefused}, want: 1},
		{reason: "no_addrs", records: []string{
			"_kith-a2a._tcp.lab.test. PTR quiet._kith-a2a._tcp.lab.test.",
			`quiet._kith-a2a._tcp.lab.test. TXT "peer=` + o + `"`,
		}, want: 1},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			s := startDNS(t, append(slices.Clone(goodRecords), tc.records...)...)
			for k, rc := range tc.rcode {
				name, typ, _ := strings.Cut(k, " ")
				s.force(name, dns.StringToType[typ], rc)
			}
			r, c := newTestDNSSD(t, s.addr)
			hints, err := r.Lookup(t.Context(), "lab.test")
			if err != nil {
				t.Fatalf("bad records failed the whole lookup: %v", err)
			}
			if n := c.Get("dnssd/" + tc.reason); n == 0 {
				t.Errorf("nothing counted as dnssd/%s; counters %v", tc.reason, c.Snapshot())
			}
			h, ok := hintFor(hints, good)
			if !ok || !sameAddrs(h.Addrs, mas("/ip4/127.0.0.1/tcp/4001")) {
				t.Errorf("the good peer is lost or changed: %+v", hints)
			}
			if len(hints) != tc.want {
				t.Errorf("got %d hints, want %d: %+v", len(hints), tc.want, hints)
			}
			for _, h := range hints {
				if len(h.Addrs) == 0 || len(h.Addrs) > dnssdMaxAddrs {
					t.Errorf("hint %s with %d addresses", h.ID, len(h.Addrs))
				}
				if h.ID == third {
					t.Errorf("a record spoke for peer %s where it should not count: %+v", third, h)
				}
			}
		})
	}
}

// An answer too big for UDP is asked again over TCP, and all of it counts.
func TestDNSSDTruncatedAnswerOverTCP(t *testing.T) {
	var records []string
	var ids []peer.ID
	for i := range 8 {
		id := testPeer(t, byte(10+i))
		ids = append(ids, id)
		for j := range 6 {
			records = append(records, fmt.Sprintf(`_dnsaddr.lab.test. TXT "dnsaddr=/ip6/2001:db8::%d:%d/udp/4001/quic-v1/p2p/%s"`, i, j, id))
		}
	}
	s := startDNS(t, records...)
	r, c := newTestDNSSD(t, s.addr)
	hints, err := r.Lookup(t.Context(), "lab.test")
	if err != nil {
		t.Fatal(err)
	}
	if len(hints) != len(ids) {
		t.Fatalf("got %d peers, want %d", len(hints), len(ids))
	}
	for _, h := range hints {
		if len(h.Addrs) != 6 {
			t.Errorf("peer %s: %d addresses, want 6", h.ID, len(h.Addrs))
		}
	}
	if !slices.Contains(s.log(), "tcp _dnsaddr.lab.test. TXT") {
		t.Errorf("the truncated answer was not asked again over TCP; queries: %v", s.log())
	}
	if snap := c.Snapshot(); len(snap) != 0 {
		t.Errorf("dropped input: %v", snap)
	}
}

func TestDNSSDErrors(t *testing.T) {
	t.Run("no such domain", func(t *testing.T) {
		s := startDNS(t, "lab.test. A 127.0.0.1")
		r, c := newTestDNSSD(t, s.addr)
		if _, err := r.Lookup(t.Context(), "nowhere.test"); !errors.Is(err, ErrNoDomain) {
			t.Fatalf("got %v, want ErrNoDomain", err)
		}
		if got := c.Get("dnssd/no_such_domain"); got != 1 {
			t.Fatalf("dnssd/no_such_domain = %d after one lookup of a missing domain, want 1", got)
		}
		// A domain that exists but publishes no peers is no error.
		hints, err := r.Lookup(t.Context(), "lab.test")
		if err != nil || len(hints) != 0 {
			t.Fatalf("got %v, %v; want no hints and no error", hints, err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		s := startDNS(t)
		r, _ := newTestDNSSD(t, s.addr)
		_, err := r.Lookup(t.Context(), "example.org") // not the server's zone
		if !errors.Is(err, ErrResolver) || !strings.Contains(err.Error(), "REFUSED") {
			t.Fatalf("got %v, want ErrResolver saying REFUSED", err)
		}
	})
	t.Run("dead server", func(t *testing.T) {
		// A socket that reads queries and never answers.
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		c := &Counters{}
		r, err := NewDNSSD(DNSSDConfig{Resolver: pc.LocalAddr().String(), Timeout: 200 * time.Millisecond, Counters: c})
		if err != nil {
			t.Fatal(err)
		}
		// No deadline on ctx: only the query timeout can end this.
		_, err = r.Lookup(context.Background(), "lab.test")
		if !errors.Is(err, ErrResolver) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), pc.LocalAddr().String()) {
			t.Fatalf("got %v, want ErrResolver naming %s and the timeout", err, pc.LocalAddr())
		}
		// kith discover shows the dead server among the counters.
		if got := c.Get("dnssd/resolver_unavailable"); got != 1 {
			t.Fatalf("dnssd/resolver_unavailable = %d after one lookup against a dead server, want 1", got)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		r, err := NewDNSSD(DNSSDConfig{Resolver: pc.LocalAddr().String(), Timeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			buf := make([]byte, 512)
			_, _, _ = pc.ReadFrom(buf) // the query arrived: now give up
			cancel()
		}()
		if _, err := r.Lookup(ctx, "lab.test"); !errors.Is(err, ErrResolver) || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want ErrResolver and context.Canceled", err)
		}
	})
	t.Run("bad domain", func(t *testing.T) {
		r, _ := newTestDNSSD(t, "127.0.0.1:53")
		if _, err := r.Lookup(t.Context(), "a..b"); err == nil || !strings.Contains(err.Error(), "a..b") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestDNSSDResolverAddress(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:5353": "127.0.0.1:5353",
		"192.0.2.1":      "192.0.2.1:53",
		"::1":            "[::1]:53",
		"[::1]:53":       "[::1]:53",
		"ns.test:53":     "ns.test:53",
	} {
		got, err := resolverAddr(in)
		if err != nil || got != want {
			t.Errorf("resolverAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ns.test", "127.0.0.1:0", "127.0.0.1:99999", ":53"} {
		if _, err := NewDNSSD(DNSSDConfig{Resolver: bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("NewDNSSD accepted resolver %q (err %v)", bad, err)
		}
	}

	dir := t.TempDir()
	conf := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(conf, []byte("# test\nsearch lab.test\nnameserver 2001:db8::53\nnameserver 192.0.2.53\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := systemResolver(conf); err != nil || got != "[2001:db8::53]:53" {
		t.Fatalf("systemResolver = %q, %v", got, err)
	}
	if err := os.WriteFile(conf, []byte("search lab.test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := systemResolver(conf); !errors.Is(err, ErrResolver) {
		t.Fatalf("no nameserver: got %v", err)
	}
}

func TestPublishAddrs(t *testing.T) {
	id, other := testPeer(t, 1), testPeer(t, 2)
	p := "/p2p/" + id.String()
	daemon := []string{
		"/ip4/127.0.0.1/tcp/4001" + p,
		"/ip4/192.168.1.5/tcp/4001" + p,
		"/ip4/192.168.1.5/udp/4001/quic-v1" + p,
		"/ip6/::1/tcp/4001" + p,
		"/ip6/fe80::1/tcp/4001" + p,
		"/ip4/203.0.113.9/tcp/4001/p2p/" + other.String() + "/p2p-circuit" + p,
	}
	strs := func(as []ma.Multiaddr) []string {
		out := make([]string, len(as))
		for i, a := range as {
			out[i] = a.String()
		}
		return out
	}
	got, err := PublishAddrs(id, daemon, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/ip4/192.168.1.5/tcp/4001", "/ip4/192.168.1.5/udp/4001/quic-v1", "/ip4/203.0.113.9/tcp/4001/p2p/" + other.String() + "/p2p-circuit"}
	if !slices.Equal(strs(got), want) {
		t.Errorf("no --ip: got %v, want %v", strs(got), want)
	}

	got, err = PublishAddrs(id, daemon[:1], nil)
	if err != nil || !slices.Equal(strs(got), []string{"/ip4/127.0.0.1/tcp/4001"}) {
		t.Errorf("loopback only: got %v, %v", strs(got), err)
	}

	got, err = PublishAddrs(id, daemon, []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::1")})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{
		"/ip4/198.51.100.1/tcp/4001", "/ip6/2001:db8::1/tcp/4001",
		"/ip4/198.51.100.1/udp/4001/quic-v1", "/ip6/2001:db8::1/udp/4001/quic-v1",
		"/ip4/203.0.113.9/tcp/4001/p2p/" + other.String() + "/p2p-circuit",
	}
	if !slices.Equal(strs(got), want) {
		t.Errorf("--ip: got %v, want %v", strs(got), want)
	}

	if _, err := PublishAddrs(id, []string{"/ip4/1.2.3.4/tcp/1/p2p/" + other.String()}, nil); err == nil {
		t.Error("an address of another peer was accepted")
	}
}
