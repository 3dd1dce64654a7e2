package discovery

// /dnsaddr/ resolution for DNS-SD: the dnsaddr= strings of a peer's TXT
// records and the _dnsaddr.<name> TXT records they point at, followed to a
// bounded depth without loops, keeping only addresses of the peer named.

import (
	"context"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/miekg/dns"
	ma "github.com/multiformats/go-multiaddr"
)

// dnsaddr reads the dnsaddr= strings of the TXT records at name (answer
// m), depth /dnsaddr/ hops below _dnsaddr.<domain>. want, when set, is
// the only peer whose addresses count; path holds the names being
// followed, to catch loops.
func (l *lookup) dnsaddr(ctx context.Context, name string, m *dns.Msg, want peer.ID, depth int, path map[string]bool) error {
	for _, rr := range l.answers(m, name, dns.TypeTXT) {
		rec, ok := rr.(*dns.TXT)
		if !ok {
			continue
		}
		for _, s := range rec.Txt {
			v, ok := strings.CutPrefix(s, txtAddr+"=")
			if !ok {
				continue // not ours
			}
			if err := l.dnsaddrString(ctx, name, v, want, depth, path); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *lookup) dnsaddrString(ctx context.Context, name, v string, want peer.ID, depth int, path map[string]bool) error {
	a, err := ma.NewMultiaddr(v)
	if err != nil {
		l.drop("bad_dnsaddr", "name", name, "dnsaddr", v, "err", err)
		return nil
	}
	first, rest := ma.SplitFirst(a)
	if first == nil {
		l.drop("bad_dnsaddr", "name", name, "dnsaddr", v, "err", "empty")
		return nil
	}
	if first.Code() != ma.P_DNSADDR {
		transport, last := ma.SplitLast(a)
		if last == nil || last.Code() != ma.P_P2P || len(transport) == 0 {
			l.drop("bad_dnsaddr", "name", name, "dnsaddr", v, "err", "want a multiaddr ending in /p2p/<peer id>")
			return nil
		}
		id, err := peer.IDFromBytes(last.RawValue())
		if err != nil {
			l.drop("bad_dnsaddr", "name", name, "dnsaddr", v, "err", err)
			return nil
		}
		if want != "" && id != want {
			l.drop("bad_dnsaddr", "name", name, "dnsaddr", v, "err", "names peer "+id.String()+", not "+want.String())
			return nil
		}
		if f := l.peer(id); f != nil {
			l.addAddr(id, f, transport)
		}
		return nil
	}

	// /dnsaddr/<host>[/p2p/<id>]: follow _dnsaddr.<host>.
	next := want
	if rest != nil {
		c, more := ma.SplitFirst(rest)
		var id peer.ID
		if c != nil && c.Code() == ma.P_P2P {
			id, err = peer.IDFromBytes(c.RawValue())
		}
		if c == nil || c.Code() != ma.P_P2P || len(more) > 0 || err != nil {
			l.drop("bad_dnsaddr", "name", name, "dnsaddr", v, "err", "only /p2p/<peer id> may follow /dnsaddr/<host>")
			return nil
		}
		if want != "" && id != want {
			l.drop("bad_dnsaddr", "name", name, "dnsaddr", v, "err", "names peer "+id.String()+", not "+want.String())
			return nil
		}
		next = id
	}
	child, err := canonicalDomain(first.Value())
	if err != nil {
		l.drop("bad_dnsaddr", "name", name, "dnsaddr", v, "err", err)
		return nil
	}
	child = dnsaddrPrefix + child
	if depth+1 > dnssdMaxDepth || path[child] {
		l.drop("too_deep", "name", name, "dnsaddr", v, "depth", depth+1)
		return nil
	}
	key := child + " " + next.String()
	if l.dnsaddrs[key] {
		return nil // already followed from elsewhere: nothing new there
	}
	l.dnsaddrs[key] = true
	m, err := l.follow(ctx, child, dns.TypeTXT)
	if err != nil || m == nil {
		return err
	}
	path[child] = true
	defer delete(path, child)
	return l.dnsaddr(ctx, child, m, next, depth+1, path)
}

// peer returns the state of peer id, creating it; nil once the lookup
