package discovery

// The publishing side of DNS-SD: the zone records that make a node
// findable by DNSSD.Lookup.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/miekg/dns"
	ma "github.com/multiformats/go-multiaddr"
)

// Zone describes the records that publish one node under a domain.
type Zone struct {
	// Domain is the domain the records go under, e.g. "lab.example.org".
	Domain string
	// Instance is the DNS-SD instance name, one DNS label; default
	// DefaultLabel(TXT.Peer).
	Instance string
	// Host is the host name the SRV record points to: one label under
	// Domain, or an absolute name ending in "."; default
	// DefaultLabel(TXT.Peer).
	Host string
	// TTL of every record, in seconds; default 300.
	TTL uint32
	// TXT is the node: its peer ID, profile names and the multiaddrs to
	// publish (without /p2p/).
	TXT TXT
}

// DefaultLabel is the DNS label a node's records use when none is given:
// "kith-" and the last 8 characters of the peer ID, lowercased. (The first
// ones are the same for every Ed25519 key: "12D3KooW".)
func DefaultLabel(id peer.ID) string {
	s := strings.ToLower(id.String())
	return "kith-" + s[max(0, len(s)-8):]
}

// ZoneRecords returns the resource records, one zone-file line each with
// absolute names, that publish z (the layout in DNSSD's doc): PTR,
// then per TCP port an SRV record, the instance's TXT record (peer= and
// profiles=), A/AAAA records of the host (the IPs of the /ip4|ip6/…/tcp/…
// addresses), and one _dnsaddr TXT record per multiaddr. It fails on a
// bad domain, instance or host name, or when there is no address.
func ZoneRecords(z Zone) ([]string, error) {
	d, err := canonicalDomain(z.Domain)
	if err != nil {
		return nil, err
	}
	if z.TXT.Peer == "" {
		return nil, errors.New("discovery: dnssd records: no peer ID")
	}
	if len(z.TXT.Addrs) == 0 {
		return nil, fmt.Errorf("discovery: dnssd records: peer %s has no address to publish", z.TXT.Peer)
	}
	inst := z.Instance
	if inst == "" {
		inst = DefaultLabel(z.TXT.Peer)
	}
	if len(inst) > 63 || inst == "" || strings.ContainsFunc(inst, func(r rune) bool { return r < ' ' || r == 0x7f || r == '.' }) {
		return nil, fmt.Errorf("discovery: dnssd records: instance name %q: want 1 to 63 bytes, no dot or control character", inst)
	}
	hostName := z.Host
	if hostName == "" {
		hostName = DefaultLabel(z.TXT.Peer)
	}
	if strings.HasSuffix(hostName, ".") {
		if _, ok := dns.IsDomainName(hostName); !ok || hostName == "." {
			return nil, fmt.Errorf("discovery: dnssd records: host %q is not a domain name", z.Host)
		}
		hostName = dns.CanonicalName(hostName)
	} else {
		if !isHostLabel(hostName) {
			return nil, fmt.Errorf("discovery: dnssd records: host %q: want one label of letters, digits and inner hyphens (or an absolute name ending in \".\")", hostName)
		}
		hostName = strings.ToLower(hostName) + "." + d
	}
	ttl := z.TTL
	if ttl == 0 {
		ttl = dnssdDefaultTTL
	}
	hdr := func(name string, t uint16) dns.RR_Header {
		return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	svc := ServiceName + "." + d
	instName := dns.Fqdn(escapeLabel(inst) + "." + svc)

	var ports []uint16
	var ips []netip.Addr
	for _, a := range z.TXT.Addrs {
		ip, port, ok := ipTCP(a)
		if !ok {
			continue
		}
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
		if !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}

	rrs := []dns.RR{&dns.PTR{Hdr: hdr(svc, dns.TypePTR), Ptr: instName}}
	for _, p := range ports {
		rrs = append(rrs, &dns.SRV{Hdr: hdr(instName, dns.TypeSRV), Port: p, Target: hostName})
	}
	rrs = append(rrs, &dns.TXT{Hdr: hdr(instName, dns.TypeTXT), Txt: TXT{Peer: z.TXT.Peer, Profiles: z.TXT.Profiles}.Strings()})
	for _, ip := range ips {
		if ip.Is4() {
			rrs = append(rrs, &dns.A{Hdr: hdr(hostName, dns.TypeA), A: ip.AsSlice()})
		} else {
			rrs = append(rrs, &dns.AAAA{Hdr: hdr(hostName, dns.TypeAAAA), AAAA: ip.AsSlice()})
		}
	}
	p2p := "/p2p/" + z.TXT.Peer.String()
	for _, a := range z.TXT.Addrs {
		s := txtAddr + "=" + a.String() + p2p
		if len(s) > maxTXTString {
			return nil, fmt.Errorf("discovery: dnssd records: address %s is too long for a TXT string (%d bytes, at most %d)", a, len(s), maxTXTString)
		}
		rrs = append(rrs, &dns.TXT{Hdr: hdr(dnsaddrPrefix+d, dns.TypeTXT), Txt: []string{s}})
	}
	out := make([]string, len(rrs))
	for i, rr := range rrs {
		out[i] = rr.String()
	}
	return out, nil
}

// escapeLabel escapes what a zone file and miekg/dns treat as special in
// a label.
func escapeLabel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '(' || c == ')' || c == ';' || c == '"' || c == '\\' || c == '@' || c == '$':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c > 0x7e:
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHostLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ipTCP reports whether a is exactly /ip4|ip6/<ip>/tcp/<port>, the kind of
// address an SRV and an A/AAAA record can say.
func ipTCP(a ma.Multiaddr) (netip.Addr, uint16, bool) {
	if len(a) != 2 || a[1].Code() != ma.P_TCP || (a[0].Code() != ma.P_IP4 && a[0].Code() != ma.P_IP6) {
		return netip.Addr{}, 0, false
	}
	ip, ok := netip.AddrFromSlice(a[0].RawValue())
	port, err := strconv.ParseUint(a[1].Value(), 10, 16)
	if !ok || err != nil || port == 0 {
		return netip.Addr{}, 0, false
	}
	return ip.Unmap(), uint16(port), true
}

// PublishAddrs chooses, from a node's listen addresses (full multiaddrs
// of peer id, as the daemon reports them), the ones to publish in DNS.
// Without ips, loopback, link-local and unspecified addresses are left out
// unless nothing else remains. With ips (a node behind port forwarding,
// or with a public IP the host does not see), every /ip4|ip6/ address is
// published once per IP in ips, with that IP in place of its own; relay
// (/p2p-circuit) and DNS addresses are kept as they are.
func PublishAddrs(id peer.ID, addrs []string, ips []netip.Addr) ([]ma.Multiaddr, error) {
	var out, local []ma.Multiaddr
	add := func(list *[]ma.Multiaddr, a ma.Multiaddr) {
		if !slices.ContainsFunc(*list, a.Equal) {
			*list = append(*list, a)
		}
	}
	for _, s := range addrs {
		a, err := PeerAddr(id, s)
		if err != nil {
			return nil, fmt.Errorf("discovery: the node's address %q: %w", s, err)
		}
		first, rest := ma.SplitFirst(a)
		isIP := first.Code() == ma.P_IP4 || first.Code() == ma.P_IP6
		circuit := slices.ContainsFunc(a, func(c ma.Component) bool { return c.Code() == ma.P_CIRCUIT })
		switch {
		case first.Code() == ma.P_IP6ZONE && !circuit:
			add(&local, a) // link-local with its interface: meaningless elsewhere
			continue
		case !isIP || circuit:
			add(&out, a)
			continue
		}
		if len(ips) > 0 {
			for _, ip := range ips {
				family := "/ip4/"
				if ip.Unmap().Is6() {
					family = "/ip6/"
				}
				c, err := ma.NewMultiaddr(family + ip.Unmap().String())
				if err != nil {
					return nil, fmt.Errorf("discovery: IP %s: %w", ip, err)
				}
				add(&out, c.Encapsulate(rest))
			}
			continue
		}
		ip, _ := netip.AddrFromSlice(first.RawValue())
		if ip = ip.Unmap(); ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() {
			add(&local, a)
			continue
		}
		add(&out, a)
	}
	if len(out) == 0 {
		out = local
	}
	return out, nil
}
