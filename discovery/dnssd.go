package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/miekg/dns"
	ma "github.com/multiformats/go-multiaddr"
)

// Lookup limits: a hostile or broken zone costs a bounded number of
// queries and yields a bounded number of hints. DNSSD's doc quotes them.
const (
	dnssdMaxInstances = 64  // PTR targets followed
	dnssdMaxRecords   = 64  // records of one type at one name
	dnssdMaxSRV       = 4   // SRV records followed per instance
	dnssdMaxPeers     = 64  // peers one lookup returns
	dnssdMaxAddrs     = 32  // addresses per peer
	dnssdMaxDepth     = 3   // /dnsaddr/ hops below _dnsaddr.D
	dnssdMaxQueries   = 400 // queries one lookup may send
	dnssdMaxCNAME     = 8   // CNAME links followed inside one answer
	dnssdUDPSize      = 4096
	dnssdTimeout      = 5 * time.Second
	dnssdDefaultTTL   = 300
)

const dnsaddrPrefix = "_dnsaddr."

// Sentinel errors of Lookup.
var (
	// ErrResolver: the DNS server could not be asked, or refused to answer.
	ErrResolver = errors.New("discovery: dnssd: DNS server unavailable")
	// ErrNoDomain: the DNS server says the domain does not exist.
	ErrNoDomain = errors.New("discovery: dnssd: no such domain")
)

// DNSSDConfig configures NewDNSSD.
type DNSSDConfig struct {
	// Resolver is the DNS server asked, "host:port" (a bare IP address
	// means port 53). "" is the first nameserver of /etc/resolv.conf,
	// read again at every lookup.
	Resolver string
	// Timeout bounds each query; default 5s. A dead server fails a lookup
	// after one Timeout.
	Timeout  time.Duration
	Logger   *slog.Logger
	Counters *Counters
}

// DNSSD resolves the kith peers published under DNS domains (DNS-SD for
// WAN discovery). It is safe for concurrent use.
//
// A domain D that a user owns names kith peers with these records
// (ZoneRecords writes them, "kith dnssd records" prints them):
//
//	_kith-a2a._tcp.D.             PTR  <instance>._kith-a2a._tcp.D.
//	<instance>._kith-a2a._tcp.D.  SRV  0 0 <tcp port> <host>.D.
//	<instance>._kith-a2a._tcp.D.  TXT  "peer=<id>" "profiles=a,b"
//	<host>.D.                     A    <ipv4>   (and AAAA <ipv6>)
//	_dnsaddr.D.                   TXT  "dnsaddr=/ip4/<ip>/tcp/<port>/p2p/<id>"  (one record per multiaddr)
//
// The first four are standard DNS-SD (RFC 6763): any DNS-SD browser sees
// the node. The _dnsaddr records are libp2p's dnsaddr convention and carry
// every transport (QUIC, relay addresses), which SRV cannot.
//
// Lookup reads all of that and two more shapes people write by hand:
//
//   - SRV and TXT records placed directly at _kith-a2a._tcp.D. They are
//     paired when that is unambiguous: the SRV records belong to the peer
//     of the one kith TXT record there. With several peers' TXT records at
//     the name, the SRV records cannot be attributed and are dropped
//     ("unpaired_srv"); each TXT record's own dnsaddr= strings still count.
//   - "dnsaddr=/dnsaddr/other.domain[/p2p/<id>]" strings under _dnsaddr,
//     followed to _dnsaddr.other.domain, at most 3 hops deep.
//     A /p2p/<id> suffix keeps only that peer's addresses.
//
// Everything found is a hint: a peer counts only once its signed
// capability assertion verifies. Bad records never fail a lookup; each is
// dropped, counted under "dnssd/<reason>" and logged at debug level:
//
//	bad_txt       a TXT record that ParseTXT rejects
//	no_txt        a DNS-SD instance without a TXT record (no peer ID)
//	bad_ptr       a PTR record naming something not directly under _kith-a2a._tcp.D
//	srv_nowhere   an SRV record whose target has no usable A/AAAA record, or port 0
//	unpaired_srv  an SRV record at the service name that belongs to no single peer
//	bad_dnsaddr   a dnsaddr= string that is not a multiaddr, lacks /p2p/<id>,
//	              or names another peer than the /dnsaddr/…/p2p/<id> leading to it
//	too_deep      /dnsaddr/ indirection deeper than 3 hops, or a loop
//	too_many      beyond a cap: 64 instances, 64 records of a type at a name,
//	              4 SRV records an instance, 64 peers, 32 addresses a peer,
//	              400 queries a lookup
//	dns_error     a follow-up query (instance, target, /dnsaddr/ name) that failed
//	no_addrs      a peer named with no address at all
//
// Lookup returns an error only when the DNS server cannot be asked (no
// answer within the timeout, connection refused, SERVFAIL or REFUSED to
// the queries at the domain itself: ErrResolver) or the domain does not
// exist (ErrNoDomain).
type DNSSD struct {
	resolver   string // "" = /etc/resolv.conf
	resolvConf string
	timeout    time.Duration
	log        *slog.Logger
	counters   *Counters
}

// NewDNSSD checks cfg and returns a resolver. It does no I/O.
func NewDNSSD(cfg DNSSDConfig) (*DNSSD, error) {
	r := &DNSSD{resolvConf: "/etc/resolv.conf", timeout: cfg.Timeout, log: cfg.Logger, counters: cfg.Counters}
	if r.timeout <= 0 {
		r.timeout = dnssdTimeout
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.counters == nil {
		r.counters = &Counters{}
	}
	if cfg.Resolver != "" {
		addr, err := resolverAddr(cfg.Resolver)
		if err != nil {
			return nil, err
		}
		r.resolver = addr
	}
	return r, nil
}

// Lookup resolves the kith peers published under domain (see the record
// layouts in DNSSD's doc) and returns one Hint per peer, with Source SourceDNSSD,
// ordered by peer ID.
func (r *DNSSD) Lookup(ctx context.Context, domain string) ([]Hint, error) {
	d, err := canonicalDomain(domain)
	if err != nil {
		return nil, err
	}
	server, err := r.server()
	if err != nil {
		r.countFailure(err, domain)
		return nil, err
	}
	hints, err := r.lookup(ctx, d, server, func(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
		return r.exchange(ctx, server, name, qtype)
	})
	if err != nil && ctx.Err() == nil {
		r.countFailure(err, domain)
	}
	return hints, err
}

// countFailure counts a failed lookup, so that "kith discover" shows a
// resolver that is down ("dnssd/resolver_unavailable") or a domain that
// does not exist ("dnssd/no_such_domain") beside the records it dropped.
func (r *DNSSD) countFailure(err error, domain string) {
	reason := "lookup_failed"
	switch {
	case errors.Is(err, ErrNoDomain):
		reason = "no_such_domain"
	case errors.Is(err, ErrResolver):
		reason = "resolver_unavailable"
	}
	r.counters.Drop(r.log, SourceDNSSD, reason, "domain", domain, "error", err)
}

func canonicalDomain(domain string) (string, error) {
	d := dns.CanonicalName(strings.TrimSpace(domain))
	if _, ok := dns.IsDomainName(d); !ok || d == "." || strings.Contains(d, "..") {
		return "", fmt.Errorf("discovery: dnssd: %q is not a domain name", domain)
	}
	return d, nil
}

// lookup holds the state of one Lookup.
type lookup struct {
	r       *DNSSD
	ask     askFunc
	server  string // for messages
	domain  string // canonical, with the trailing dot
	queries int
	spent   bool // the query budget ran out (counted once)

	peers    map[peer.ID]*found
	order    []peer.ID
	hosts    map[string][]netip.Addr // SRV target -> addresses, per lookup
	dnsaddrs map[string]bool         // "name want" pairs already followed
}

// found is what one lookup learned about a peer.
type found struct {
	addrs    []ma.Multiaddr
	profiles []string
	dropped  bool // an address source of this peer was dropped and counted
	capped   bool
}

func (r *DNSSD) lookup(ctx context.Context, domain, server string, ask askFunc) ([]Hint, error) {
	l := &lookup{r: r, ask: ask, server: server, domain: domain, peers: map[peer.ID]*found{}, hosts: map[string][]netip.Addr{}, dnsaddrs: map[string]bool{}}
	svc := ServiceName + "." + domain

	// The questions about the domain itself come first, so that a zone
	// spending the query budget on instances cannot fail the lookup.
	ptr, err := l.top(ctx, svc, dns.TypePTR)
	if err != nil {
		return nil, err
	}
	var srv, txt *dns.Msg
	svcExists := ptr.Rcode == dns.RcodeSuccess
	if svcExists {
		if srv, err = l.top(ctx, svc, dns.TypeSRV); err != nil {
			return nil, err
		}
		if txt, err = l.top(ctx, svc, dns.TypeTXT); err != nil {
			return nil, err
		}
	}
	name := dnsaddrPrefix + domain
	da, err := l.top(ctx, name, dns.TypeTXT)
	if err != nil {
		return nil, err
	}
	if !svcExists && da.Rcode == dns.RcodeNameError {
		soa, err := l.top(ctx, domain, dns.TypeSOA)
		if err != nil {
			return nil, err
		}
		if soa.Rcode == dns.RcodeNameError {
			return nil, fmt.Errorf("%w: %s", ErrNoDomain, domain)
		}
	}

	if svcExists {
		for _, inst := range l.instances(ptr, svc) {
			if err := l.instance(ctx, inst); err != nil {
				return nil, err
			}
		}
		if err := l.direct(ctx, svc, srv, txt); err != nil {
			return nil, err
		}
	}
	if err := l.dnsaddr(ctx, name, da, "", 0, map[string]bool{name: true}); err != nil {
		return nil, err
	}
	return l.hints(), nil
}

// drop counts and logs one dropped piece of input.
func (l *lookup) drop(reason string, args ...any) {
	l.r.counters.Drop(l.r.log, SourceDNSSD, reason, append([]any{"domain", l.domain}, args...)...)
}

// query sends one query within the lookup's budget.
func (l *lookup) query(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	if l.queries >= dnssdMaxQueries {
		return nil, errBudget
	}
	l.queries++
	return l.ask(ctx, name, qtype)
}

var errBudget = errors.New("query budget spent")

// top asks one of the questions about the domain itself: any failure
// there, or an rcode other than NOERROR and NXDOMAIN, fails the lookup.
func (l *lookup) top(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m, err := l.query(ctx, name, qtype)
	if err != nil {
		return nil, err
	}
	if m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("%w: %s answered %s to %s %s", ErrResolver, l.server, rcodeString(m.Rcode), name, dns.TypeToString[qtype])
	}
	return m, nil
}

// follow asks a follow-up question. A failure is dropped under dns_error
// (or too_many, when the query budget is spent) and returns nil; only
// the end of ctx is an error.
func (l *lookup) follow(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m, err := l.query(ctx, name, qtype)
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, errBudget):
		if !l.spent {
			l.spent = true
			l.drop("too_many", "name", name, "type", dns.TypeToString[qtype], "queries", dnssdMaxQueries)
		}
		return nil, nil
	case err != nil:
		l.drop("dns_error", "name", name, "type", dns.TypeToString[qtype], "err", err)
		return nil, nil
	case m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError:
		l.drop("dns_error", "name", name, "type", dns.TypeToString[qtype], "rcode", rcodeString(m.Rcode))
		return nil, nil
	}
	return m, nil
}

// answers returns the records of type qtype at name in m's answer
// section, following a CNAME chain inside the answer, at most
// dnssdMaxRecords of them (the rest counted as too_many).
func (l *lookup) answers(m *dns.Msg, name string, qtype uint16) []dns.RR {
	if m == nil {
		return nil
	}
	target := name
	for range dnssdMaxCNAME {
		var out []dns.RR
		next := ""
		for _, rr := range m.Answer {
			h := rr.Header()
			if !strings.EqualFold(h.Name, target) {
				continue
			}
			if h.Rrtype == qtype {
				out = append(out, rr)
			} else if c, ok := rr.(*dns.CNAME); ok && next == "" {
				next = c.Target
			}
		}
		if len(out) > dnssdMaxRecords {
			l.drop("too_many", "name", name, "type", dns.TypeToString[qtype], "records", len(out))
			out = out[:dnssdMaxRecords]
		}
		if len(out) > 0 || next == "" {
			return out
		}
		target = next
	}
	return nil
}

// instances returns the DNS-SD instance names the PTR answer lists.
func (l *lookup) instances(m *dns.Msg, svc string) []string {
	var out []string
	for _, rr := range l.answers(m, svc, dns.TypePTR) {
		p, ok := rr.(*dns.PTR)
		if !ok {
			continue
		}
		inst := dns.CanonicalName(p.Ptr)
		if _, ok := dns.IsDomainName(inst); !ok || dns.CountLabel(inst) != dns.CountLabel(svc)+1 || !dns.IsSubDomain(svc, inst) {
			l.drop("bad_ptr", "ptr", p.Ptr)
			continue
		}
		if slices.Contains(out, inst) {
			continue
		}
		if len(out) == dnssdMaxInstances {
			l.drop("too_many", "ptr", p.Ptr, "instances", dnssdMaxInstances)
			continue
		}
		out = append(out, inst)
	}
	return out
}

// instance resolves one DNS-SD instance: its TXT record names the peer,
// its SRV records give host and port.
func (l *lookup) instance(ctx context.Context, inst string) error {
	txtMsg, err := l.follow(ctx, inst, dns.TypeTXT)
	if err != nil || txtMsg == nil {
		return err
	}
	var ss []string
	for _, rr := range l.answers(txtMsg, inst, dns.TypeTXT) {
		if t, ok := rr.(*dns.TXT); ok {
			ss = append(ss, t.Txt...)
		}
	}
	if len(ss) == 0 {
		l.drop("no_txt", "instance", inst)
		return nil
	}
	t, err := ParseTXT(ss)
	if err != nil {
		l.drop("bad_txt", "instance", inst, "err", err)
		return nil
	}
	f := l.peer(t.Peer)
	if f == nil {
		return nil
	}
	l.addTXT(t.Peer, f, t)
	srvMsg, err := l.follow(ctx, inst, dns.TypeSRV)
	if err != nil {
		return err
	}
	if srvMsg == nil {
		f.dropped = true
		return nil
	}
	srvs := l.answers(srvMsg, inst, dns.TypeSRV)
	if len(srvs) > dnssdMaxSRV {
		l.drop("too_many", "instance", inst, "srv", len(srvs))
		srvs = srvs[:dnssdMaxSRV]
	}
	for _, rr := range srvs {
		if err := l.srv(ctx, t.Peer, f, rr); err != nil {
			return err
		}
	}
	return nil
}

// direct reads SRV and TXT records placed directly at the service name.
func (l *lookup) direct(ctx context.Context, svc string, srvMsg, txtMsg *dns.Msg) error {
	var ids []peer.ID
	for _, rr := range l.answers(txtMsg, svc, dns.TypeTXT) {
		rec, ok := rr.(*dns.TXT)
		if !ok {
			continue
		}
		t, err := ParseTXT(rec.Txt)
		if err != nil {
			l.drop("bad_txt", "name", svc, "err", err)
			continue
		}
		if f := l.peer(t.Peer); f != nil {
			l.addTXT(t.Peer, f, t)
			if !slices.Contains(ids, t.Peer) {
				ids = append(ids, t.Peer)
			}
		}
	}
	srvs := l.answers(srvMsg, svc, dns.TypeSRV)
	if len(srvs) == 0 {
		return nil
	}
	if len(ids) != 1 {
		for _, rr := range srvs {
			l.drop("unpaired_srv", "srv", rr.String(), "peers", len(ids))
		}
		return nil
	}
	if len(srvs) > dnssdMaxSRV {
		l.drop("too_many", "name", svc, "srv", len(srvs))
		srvs = srvs[:dnssdMaxSRV]
	}
	f := l.peer(ids[0])
	for _, rr := range srvs {
		if err := l.srv(ctx, ids[0], f, rr); err != nil {
			return err
		}
	}
	return nil
}

// srv adds the TCP addresses one SRV record leads to.
func (l *lookup) srv(ctx context.Context, id peer.ID, f *found, rr dns.RR) error {
	s, ok := rr.(*dns.SRV)
	if !ok {
		return nil
	}
	target := dns.CanonicalName(s.Target)
	if s.Port == 0 || target == "." {
		// RFC 2782: target "." says the service is not offered there.
		l.drop("srv_nowhere", "peer", id, "srv", s.String())
		f.dropped = true
		return nil
	}
	ips, err := l.host(ctx, target)
	if err != nil {
		return err
	}
	if len(ips) == 0 {
		l.drop("srv_nowhere", "peer", id, "srv", s.String())
		f.dropped = true
		return nil
	}
	for _, ip := range ips {
		family := "ip4"
		if ip.Is6() {
			family = "ip6"
		}
		a, err := ma.NewMultiaddr("/" + family + "/" + ip.String() + "/tcp/" + strconv.Itoa(int(s.Port)))
		if err != nil {
			continue
		}
		l.addAddr(id, f, a)
	}
	return nil
}

// host returns the usable addresses of an SRV target (A and AAAA),
// asked once per lookup.
func (l *lookup) host(ctx context.Context, target string) ([]netip.Addr, error) {
	if ips, ok := l.hosts[target]; ok {
		return ips, nil
	}
	var ips []netip.Addr
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		m, err := l.follow(ctx, target, qtype)
		if err != nil {
			return nil, err
		}
		for _, rr := range l.answers(m, target, qtype) {
			var ip net.IP
			switch v := rr.(type) {
			case *dns.A:
				ip = v.A.To4()
			case *dns.AAAA:
				ip = v.AAAA.To16()
			}
			a, ok := netip.AddrFromSlice(ip)
			if !ok || a.IsUnspecified() || a.IsMulticast() {
				continue
			}
			if a = a.Unmap(); !slices.Contains(ips, a) {
				ips = append(ips, a)
			}
		}
	}
	l.hosts[target] = ips
	return ips, nil
}

// holds dnssdMaxPeers peers (the new one counted as too_many).
func (l *lookup) peer(id peer.ID) *found {
	if f, ok := l.peers[id]; ok {
		return f
	}
	if len(l.peers) == dnssdMaxPeers {
		l.drop("too_many", "peer", id, "peers", dnssdMaxPeers)
		return nil
	}
	f := &found{}
	l.peers[id] = f
	l.order = append(l.order, id)
	return f
}

func (l *lookup) addTXT(id peer.ID, f *found, t TXT) {
	for _, p := range t.Profiles {
		if !slices.Contains(f.profiles, p) {
			f.profiles = append(f.profiles, p)
		}
	}
	for _, a := range t.Addrs {
		l.addAddr(id, f, a)
	}
}

func (l *lookup) addAddr(id peer.ID, f *found, a ma.Multiaddr) {
	if slices.ContainsFunc(f.addrs, a.Equal) {
		return
	}
	if len(f.addrs) == dnssdMaxAddrs {
		if !f.capped {
			l.drop("too_many", "peer", id, "addrs", dnssdMaxAddrs)
			f.capped = true
		}
		return
	}
	f.addrs = append(f.addrs, a)
}

// hints turns what was found into hints, ordered by peer ID.
func (l *lookup) hints() []Hint {
	ids := slices.Clone(l.order)
	slices.Sort(ids)
	var out []Hint
	for _, id := range ids {
		f := l.peers[id]
		if len(f.addrs) == 0 {
			if !f.dropped {
				l.drop("no_addrs", "peer", id)
			}
			continue
		}
		out = append(out, Hint{ID: id, Addrs: f.addrs, Source: SourceDNSSD, Profiles: f.profiles})
	}
	return out
}
