package node

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/kithmesh/kith/discovery"
	"github.com/kithmesh/kith/internal/backoff"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
)

// dnssdRetry is the first wait after a failed DNS-SD lookup; it doubles
// with each failure in a row, up to the dnssd_interval.
const dnssdRetry = 10 * time.Second

// runDNSSD resolves every domain of cfg.DNSSDDomains (asking
// cfg.DNSSDResolver) at once and then every cfg.DNSSDInterval, and hands
// each peer found, other than this node, to sink. A domain whose lookup
// fails (no answer, no such domain) is tried again sooner: after 10s,
// then doubling, never later than the interval. Bad records are counted
// in counters. It returns when ctx ends.
func (n *Node) runDNSSD(ctx context.Context, cfg config.Discovery, sink discovery.Sink, counters *discovery.Counters) {
	if len(cfg.DNSSDDomains) == 0 {
		return
	}
	r, err := discovery.NewDNSSD(discovery.DNSSDConfig{
		Resolver: cfg.DNSSDResolver,
		Logger:   n.log,
		Counters: counters,
	})
	if err != nil {
		n.log.Warn("dnssd discovery off", "err", err)
		return
	}
	var self peer.ID
	n.mu.Lock()
	if n.id != nil {
		self = n.id.PeerID()
	}
	n.mu.Unlock()
	n.resolveDNSSD(ctx, r.Lookup, cfg.DNSSDDomains, cfg.DNSSDInterval.Std(), dnssdRetry, self, sink)
}

// dnssdLookup is discovery.DNSSD.Lookup.
type dnssdLookup func(ctx context.Context, domain string) ([]discovery.Hint, error)

// resolveDNSSD is runDNSSD's schedule, apart so that tests can shorten
// the waits.
func (n *Node) resolveDNSSD(ctx context.Context, lookup dnssdLookup, domains []string, interval, retry time.Duration, self peer.ID, sink discovery.Sink) {
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	type domainState struct {
		name  string
		next  time.Time
		retry backoff.Backoff // reset by a success
		ok    bool            // the last lookup succeeded
	}
	var states []*domainState
	for _, d := range domains {
		if !slices.ContainsFunc(states, func(s *domainState) bool { return s.name == d }) {
			states = append(states, &domainState{name: d, retry: backoff.Backoff{Initial: retry, Max: interval}})
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		for _, st := range states {
			if time.Now().Before(st.next) {
				continue
			}
			hints, err := lookup(ctx, st.name)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				wait := st.retry.Next()
				st.next = time.Now().Add(wait)
				st.ok = false
				n.log.Warn("dnssd lookup failed", "domain", st.name, "err", err, "retry_in", wait)
				continue
			}
			st.next = time.Now().Add(interval)
			st.retry.Reset()
			level := n.log.Debug
			if !st.ok {
				level = n.log.Info // first success, or first after failures
			}
			st.ok = true
			level("dnssd lookup", "domain", st.name, "peers", len(hints))
			for _, h := range hints {
				if h.ID == self {
					continue
				}
				n.log.Debug("dnssd hint", "domain", st.name, "peer", h.ID, "addrs", h.Addrs, "profiles", h.Profiles)
				sink(ctx, h)
			}
		}
		next := states[0].next
		for _, st := range states[1:] {
			if st.next.Before(next) {
				next = st.next
			}
		}
		timer.Reset(time.Until(next))
	}
}

// DNSSDZone says where and how "kith dnssd records" publishes a node:
// the domain, and optionally the instance and host names, the TTL, and
// IPs to publish in place of the node's own.
type DNSSDZone struct {
	Domain   string       // e.g. "lab.example.org"; required
	Instance string       // DNS-SD instance name; "" is kith-<last 8 of the peer ID>
	Host     string       // host name under Domain, or absolute ending in "."; "" is as Instance
	TTL      uint32       // seconds; 0 is 300
	IPs      []netip.Addr // publish these in place of the node's own IPs
}

// DNSSDRecords returns, in zone-file syntax, the records that publish the
// node info describes under z (DNS-SD PTR, SRV and TXT, A/AAAA, and one
// _dnsaddr TXT per multiaddr), and whether every address published is
// loopback (so no other machine could use them).
func DNSSDRecords(info api.NodeInfo, z DNSSDZone) (lines []string, onlyLoopback bool, err error) {
	id, err := peer.Decode(info.PeerID)
	if err != nil {
		return nil, false, fmt.Errorf("the daemon's peer ID %q: %w", info.PeerID, err)
	}
	addrs, err := discovery.PublishAddrs(id, info.Addrs, z.IPs)
	if err != nil {
		return nil, false, err
	}
	lines, err = discovery.ZoneRecords(discovery.Zone{
		Domain: z.Domain, Instance: z.Instance, Host: z.Host, TTL: z.TTL,
		TXT: discovery.TXT{Peer: id, Profiles: info.Profiles, Addrs: addrs},
	})
	if err != nil {
		return nil, false, err
	}
	onlyLoopback = len(addrs) > 0
	for _, a := range addrs {
		onlyLoopback = onlyLoopback && manet.IsIPLoopback(a)
	}
	return lines, onlyLoopback, nil
}
