package discovery

// The DNS client half of DNS-SD: which server to ask, and one question
// asked the way real servers need it (EDNS0, TCP on truncation, a retry
// without EDNS0 for servers that refuse it), bounded in time. What the
// answers mean for kith peers is dnssd.go's business.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/miekg/dns"
)

// resolverAddr checks a "host:port" DNS server address; a bare IP address
// gets port 53.
func resolverAddr(s string) (string, error) {
	if ip, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return net.JoinHostPort(ip.String(), "53"), nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("discovery: dnssd resolver %q: want host:port or an IP address: %v", s, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "", fmt.Errorf("discovery: dnssd resolver %q: bad port %q", s, port)
	}
	if host == "" {
		return "", fmt.Errorf("discovery: dnssd resolver %q: no host", s)
	}
	return s, nil
}

// server is the DNS server to ask now.
func (r *DNSSD) server() (string, error) {
	if r.resolver != "" {
		return r.resolver, nil
	}
	return systemResolver(r.resolvConf)
}

// systemResolver returns the first nameserver of a resolv.conf file.
func systemResolver(path string) (string, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: system resolver: %v (set dnssd_resolver)", ErrResolver, err)
	}
	if len(cc.Servers) == 0 {
		return "", fmt.Errorf("%w: no nameserver in %s (set dnssd_resolver)", ErrResolver, path)
	}
	// resolv.conf may scope an IPv6 server (fe80::1%eth0); JoinHostPort
	// brackets it either way.
	return net.JoinHostPort(cc.Servers[0], cc.Port), nil
}

// askFunc sends one query and returns the answer message, whatever its
// rcode; an error means no usable answer came.
type askFunc func(ctx context.Context, name string, qtype uint16) (*dns.Msg, error)

// exchange asks server one question over UDP with EDNS0, again over TCP
// when the answer is truncated, and again without EDNS0 when the server
// does not understand it (FORMERR without an OPT record, RFC 6891 §7).
func (r *DNSSD) exchange(ctx context.Context, server, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.RecursionDesired = true
	q.SetEdns0(dnssdUDPSize, false)
	m, err := r.exchangeNet(ctx, "udp", server, q)
	if err == nil && m.Rcode == dns.RcodeFormatError && m.IsEdns0() == nil {
		q.Extra = nil
		m, err = r.exchangeNet(ctx, "udp", server, q)
	}
	if err == nil && m.Truncated {
		m, err = r.exchangeNet(ctx, "tcp", server, q)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: asking %s for %s %s: %w", ErrResolver, server, name, dns.TypeToString[qtype], err)
	}
	if len(m.Question) != 1 || m.Question[0].Qtype != qtype || !strings.EqualFold(m.Question[0].Name, name) {
		return nil, fmt.Errorf("%w: %s answered another question than %s %s", ErrResolver, server, name, dns.TypeToString[qtype])
	}
	return m, nil
}

func (r *DNSSD) exchangeNet(parent context.Context, network, server string, q *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(parent, r.timeout)
	defer cancel()
	c := &dns.Client{Net: network, Timeout: r.timeout}
	conn, err := c.DialContext(ctx, server)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// The client honours the context's deadline but not its cancellation:
	// closing the connection ends a read at once when ctx ends.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	m, _, err := c.ExchangeWithConnContext(ctx, q, conn)
	var ne net.Error
	switch {
	case err == nil:
	case parent.Err() != nil:
		err = fmt.Errorf("%w (%v)", parent.Err(), err)
	case ctx.Err() != nil || errors.As(err, &ne) && ne.Timeout():
		// The read deadline and the close above race to end the read;
		// either way the server did not answer in time.
		err = fmt.Errorf("no answer within %v (%v): %w", r.timeout, err, context.DeadlineExceeded)
	}
	return m, err
}

func rcodeString(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return "rcode " + strconv.Itoa(rc)
}
