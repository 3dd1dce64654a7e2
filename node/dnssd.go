package node

import (
	"context"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/discovery"
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
	retry = min(retry, interval)
	type domainState struct {
		name    string
		next    time.Time
		backoff time.Duration // 0 after a success
		ok      bool          // the last lookup succeeded
	}
	var states []*domainState
	for _, d := range domains {
		if !slices.ContainsFunc(states, func(s *domainState) bool { return s.name == d }) {
			states = append(states, &domainState{name: d})
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
				st.backoff = min(max(2*st.backoff, retry), interval)
				st.next = time.Now().Add(st.backoff)
				st.ok = false
				n.log.Warn("dnssd lookup failed", "domain", st.name, "err", err, "retry_in", st.backoff)
				continue
			}
			st.next = time.Now().Add(interval)
			st.backoff = 0
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
