package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/sec"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/discovery"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// hintAddrTTL is how long addresses from a discovery hint stay in the
// peerstore; sources repeat their hints well within it.
const hintAddrTTL = 30 * time.Minute

const (
	// providersTimeout bounds the search for a profile's providers: dials,
	// DHT look-ups and capability queries.
	providersTimeout = 10 * time.Second
	// reachDialTimeout bounds one dial of a known provider.
	reachDialTimeout = 5 * time.Second
	// pullProviders is how many providers the DHT is asked for when no
	// known one has a free slot.
	pullProviders = 8
)

// discoverer runs the discovery sources of [discovery] and turns their
// hints into connected, queried peers.
type discoverer struct {
	cfg  config.Discovery
	h    host.Host
	st   *store.Store
	eng  *delegation.Engine
	gate *gater
	log  *slog.Logger

	counters *discovery.Counters // the node's, exported at /metrics
	dht      *discovery.DHT      // nil when off
	gossip   *discovery.Gossip

	ctx context.Context // Run's; hints after it ends are ignored
	wg  sync.WaitGroup

	mu      sync.Mutex
	sources map[peer.ID]map[discovery.Source]time.Time // this run's hints
	dialing map[peer.ID]bool
	addrs   map[peer.ID][]string // addresses written to the store this run
	wrong   map[peer.ID][]string // addresses where another node answered for the ID
}

func newDiscoverer(ctx context.Context, n *Node, h host.Host, st *store.Store, eng *delegation.Engine, gate *gater) (*discoverer, error) {
	d := &discoverer{
		cfg: n.cfg.Discovery, h: h, st: st, eng: eng, gate: gate, log: n.opts.Logger.With("component", "discovery"),
		ctx:      ctx,
		counters: n.metrics.discovery,
		sources:  map[peer.ID]map[discovery.Source]time.Time{},
		dialing:  map[peer.ID]bool{},
		addrs:    map[peer.ID][]string{},
		wrong:    map[peer.ID][]string{},
	}
	if d.cfg.DHT != config.DHTOff {
		dht, err := discovery.NewDHT(ctx, h, discovery.DHTConfig{Mode: d.cfg.DHT.String(), Logger: d.log, Counters: d.counters})
		if err != nil {
			return nil, err
		}
		d.dht = dht
	}
	if d.cfg.Gossip {
		g, err := discovery.NewGossip(ctx, h, discovery.GossipConfig{
			Logger: d.log, Counters: d.counters, LegacyTopic: d.cfg.LegacyTopic, FindPeers: d.topicPeers,
			Allowed:  func(p peer.ID) bool { return !gate.denied(p) },
			OnAdvert: d.advert,
		})
		if err != nil {
			if d.dht != nil {
				_ = d.dht.Close()
			}
			return nil, err
		}
		d.gossip = g
	}
	return d, nil
}

// run serves until ctx ends, then stops every source.
func (d *discoverer) run(ctx context.Context, n *Node) {
	defer d.wg.Wait()
	if d.dht != nil {
		defer d.dht.Close()
	}
	if d.gossip != nil {
		defer d.gossip.Close()
	}
	if d.cfg.MDNS {
		m, err := discovery.StartMDNS(d.h, discovery.MDNSConfig{Logger: d.log, Counters: d.counters, Profiles: d.profileNames()}, d.hint)
		if err != nil {
			d.log.Warn("mdns off", "err", err)
		} else {
			defer m.Close()
		}
	}
	if len(d.cfg.DNSSDDomains) > 0 {
		d.goRun(func() { n.runDNSSD(ctx, d.cfg, d.hint, d.counters) })
	}
	if d.dht != nil {
		d.goRun(func() { d.bootstrapDHT(ctx) })
		d.goRun(func() { d.dht.Run(ctx, d.profileNames) })
	}
	if d.gossip != nil {
		d.goRun(func() { d.gossip.Run(ctx, advertSource{d}, d.advertPolicy()) })
	}
	<-ctx.Done()
}

func (d *discoverer) goRun(f func()) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		f()
	}()
}

func (d *discoverer) profileNames() []string {
	var names []string
	for _, p := range d.eng.Profiles() {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// hint is every source's Sink: it records where the peer was found,
// remembers its addresses, and connects to it and asks its capabilities
// if it is not connected yet. Hints about denied peers are dropped.
func (d *discoverer) hint(_ context.Context, x discovery.Hint) {
	if x.ID == d.h.ID() || x.ID == "" {
		return
	}
	d.counters.Hint(x.Source)
	if d.gate.denied(x.ID) {
		d.counters.Drop(d.log, x.Source, "denied", "peer", x.ID)
		return
	}
	if d.ctx.Err() != nil {
		return
	}
	// An address where another node answered for this ID (a DNS record
	// naming the wrong peer) is not dialled again this run.
	d.mu.Lock()
	wrong := d.wrong[x.ID]
	d.mu.Unlock()
	if len(wrong) > 0 {
		x.Addrs = slices.DeleteFunc(slices.Clone(x.Addrs), func(a ma.Multiaddr) bool { return slices.Contains(wrong, a.String()) })
		if len(x.Addrs) == 0 {
			return
		}
	}
	if len(x.Addrs) > 0 {
		d.h.Peerstore().AddAddrs(x.ID, x.Addrs, hintAddrTTL)
	}
	d.mu.Lock()
	srcs := d.sources[x.ID]
	if srcs == nil {
		srcs = map[discovery.Source]time.Time{}
		d.sources[x.ID] = srcs
	}
	_, known := srcs[x.Source]
	srcs[x.Source] = time.Now()
	var newAddrs []ma.Multiaddr
	for _, a := range x.Addrs {
		if s := a.String(); !slices.Contains(d.addrs[x.ID], s) {
			newAddrs = append(newAddrs, a)
			d.addrs[x.ID] = append(d.addrs[x.ID], s)
		}
	}
	// A gossiped advert may come from a peer several hops away whose
	// addresses nobody told us: nothing to dial then.
	dialable := len(x.Addrs) > 0 || len(d.h.Peerstore().Addrs(x.ID)) > 0
	dial := dialable && !d.dialing[x.ID] && d.h.Network().Connectedness(x.ID) != network.Connected
	if dial {
		d.dialing[x.ID] = true
	}
	d.mu.Unlock()

	// The store remembers peers across restarts, and the node redials
	// what it remembers: write a hint down only once the peer is proven to
	// be there, by a connection (whose handshake proves the ID) or by its
	// signature (a gossiped advert). A record naming another node's ID at
	// some address then leaves nothing behind.
	proven := d.h.Network().Connectedness(x.ID) == network.Connected || x.Source == discovery.SourceGossip
	if proven && (!known || len(newAddrs) > 0) {
		d.remember(x, newAddrs)
	} else if !proven {
		d.forgetAddrs(x.ID, newAddrs)
	}
	if dial {
		d.goRun(func() {
			defer func() {
				d.mu.Lock()
				delete(d.dialing, x.ID)
				d.mu.Unlock()
			}()
			d.connect(x)
		})
	}
}

// isWrongPeer reports whether a dial reached a node with another peer ID
// than the one asked for.
func isWrongPeer(err error) bool {
	var v sec.ErrPeerIDMismatch
	var p *sec.ErrPeerIDMismatch
	return errors.As(err, &v) || errors.As(err, &p) || strings.Contains(err.Error(), "peer id mismatch")
}

// remember writes a hint's source and its new addresses to the store;
// only what is new, so that a source repeating itself costs no disk write.
func (d *discoverer) remember(x discovery.Hint, addrs []ma.Multiaddr) {
	if _, err := d.st.UpdatePeer(x.ID, func(p *store.Peer) error {
		if !slices.Contains(p.Sources, string(x.Source)) {
			p.Sources = append(p.Sources, string(x.Source))
		}
		for _, a := range addrs {
			if s := a.String(); !slices.Contains(p.Addrs, s) {
				p.Addrs = append(p.Addrs, s)
			}
		}
		return nil
	}); err != nil {
		d.log.Warn("record discovered peer", "peer", x.ID, "err", err)
	}
}

// forgetAddrs takes back addresses hint marked as written to the store
// when they were not, so that a later hint with them writes them.
func (d *discoverer) forgetAddrs(p peer.ID, addrs []ma.Multiaddr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addrs[p] = slices.DeleteFunc(d.addrs[p], func(s string) bool {
		return slices.ContainsFunc(addrs, func(a ma.Multiaddr) bool { return a.String() == s })
	})
}

// connect dials a hinted peer, asks its capabilities and hands it to the
// DHT as a bootstrap peer. Once connected, the hint is written down.
func (d *discoverer) connect(x discovery.Hint) {
	ctx, cancel := context.WithTimeout(d.ctx, 15*time.Second)
	defer cancel()
	if err := d.h.Connect(ctx, peer.AddrInfo{ID: x.ID, Addrs: x.Addrs}); err != nil {
		reason := "unreachable"
		if isWrongPeer(err) {
			reason = "wrong_peer"
			d.mu.Lock()
			for _, a := range x.Addrs {
				if s := a.String(); !slices.Contains(d.wrong[x.ID], s) {
					d.wrong[x.ID] = append(d.wrong[x.ID], s)
				}
			}
			d.mu.Unlock()
			d.h.Peerstore().SetAddrs(x.ID, x.Addrs, 0) // forget them
		}
		d.counters.Drop(d.log, x.Source, reason, "peer", x.ID, "err", oneLine(err.Error()))
		return
	}
	d.remember(x, x.Addrs)
	if _, err := d.eng.QueryCapabilities(ctx, x.ID); err != nil {
		d.log.Debug("capability query", "peer", x.ID, "source", x.Source, "err", err)
	}
	if d.dht != nil {
		_ = d.dht.Bootstrap(ctx, []peer.AddrInfo{{ID: x.ID}})
	}
}

// bootstrapDHT seeds the DHT with every stored peer that is not denied
// (static peers and earlier finds); later finds are added as they come.
func (d *discoverer) bootstrapDHT(ctx context.Context) {
	peers, err := d.st.ListPeers()
	if err != nil {
		return
	}
	var ais []peer.AddrInfo
	for _, p := range peers {
		if p.Access == store.AccessDeny || p.ID == d.h.ID() {
			continue
		}
		ai := peer.AddrInfo{ID: p.ID}
		for _, s := range p.Addrs {
			if a, err := ma.NewMultiaddr(s); err == nil {
				ai.Addrs = append(ai.Addrs, a)
			}
		}
		ais = append(ais, ai)
	}
	if len(ais) > 0 {
		if err := d.dht.Bootstrap(ctx, ais); err != nil {
			d.log.Debug("dht bootstrap", "err", err)
		}
	}
}

// advert takes a verified gossiped advert.
func (d *discoverer) advert(a discovery.Advert) {
	if err := d.eng.LearnAdvert(a.From, a.Signed); err != nil {
		d.counters.Drop(d.log, discovery.SourceGossip, "rejected", "peer", a.From, "err", err)
		return
	}
	d.hint(d.ctx, discovery.Hint{ID: a.From, Source: discovery.SourceGossip, Profiles: profileNamesOf(a.Assertion)})
}

func profileNamesOf(a protocol.CapabilityAssertion) []string {
	var out []string
	for _, p := range a.Profiles {
		out = append(out, p.Name)
	}
	return out
}

// advertSource is what the node advertises: the engine's signed advert,
// load and profiles.
type advertSource struct{ d *discoverer }

func (s advertSource) Advert() (crypto.Assertion, protocol.CapabilityAssertion, error) {
	return s.d.eng.Advert()
}
func (s advertSource) Capacity() protocol.Capacity { return s.d.eng.Capacity() }
func (s advertSource) ProfileNames() []string      { return s.d.profileNames() }

// topicPeers names peers on the adverts topic of profile: its providers,
// as the DHT knows them.
func (d *discoverer) topicPeers(ctx context.Context, profile string, limit int) []peer.AddrInfo {
	if d.dht == nil {
		return nil
	}
	hints, err := d.dht.FindProviders(ctx, profile, limit)
	if err != nil {
		d.log.Debug("dht find topic peers", "profile", profile, "err", err)
	}
	out := make([]peer.AddrInfo, 0, len(hints))
	for _, x := range hints {
		if !d.gate.denied(x.ID) {
			out = append(out, x.AddrInfo())
		}
	}
	return out
}

// advertPolicy is when the node publishes its advert ([discovery]).
func (d *discoverer) advertPolicy() discovery.AdvertPolicy {
	push := d.cfg.AdvertPushMax
	if push == 0 {
		push = -1 // no limit
	}
	return discovery.AdvertPolicy{Refresh: d.cfg.AdvertInterval.Std(), LoadInterval: d.cfg.LoadInterval.Std(), PushMax: push}
}

// providers lists the peers that offer profile and that this node is now
// connected to, and, apart, the known providers it cannot reach, each with
// the reason. Known providers (verified capabilities, from queries and
// gossip) come first: each one not connected is dialled, at the addresses
// the peerstore has or, when it has none (a gossiped advert carries none),
// at those the DHT finds. When none of them can be reached and the DHT is
// on, the providers the DHT names are connected and asked too.
func (d *discoverer) providers(ctx context.Context, profile string) ([]peer.ID, map[peer.ID]error) {
	ctx, cancel := context.WithTimeout(ctx, providersTimeout)
	defer cancel()
	if d.gossip != nil {
		// From now on the adverts of its providers reach this node.
		if err := d.gossip.Want(profile); err != nil {
			d.log.Debug("want profile", "profile", profile, "err", err)
		}
	}
	var (
		free        bool // a reached provider has a free slot, as far as is known
		out         []peer.ID
		unreachable = map[peer.ID]error{}
		mu          sync.Mutex
		wg          sync.WaitGroup
	)
	for p, k := range d.eng.KnownCapabilities() {
		if p == d.h.ID() || d.gate.denied(p) || !slices.ContainsFunc(k.Assertion.Profiles, func(x protocol.Profile) bool { return x.Name == profile }) {
			continue
		}
		wg.Go(func() {
			err := d.reach(ctx, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				unreachable[p] = err
				return
			}
			out = append(out, p)
			free = free || k.Assertion.Capacity.FreeSlots > 0
		})
	}
	wg.Wait()
	// Past advert_push_max providers of a profile, the rest push nothing:
	// when none of those known has a free slot, pull a few more from the
	// DHT and ask them.
	if free || d.dht == nil {
		return out, unreachable
	}
	hints, err := d.dht.FindProviders(ctx, profile, pullProviders)
	if err != nil {
		d.log.Debug("dht find providers", "profile", profile, "err", err)
	}
	// The goroutines below append to out as they go: the loop checks
	// against what the known providers gave, read once.
	known := slices.Clone(out)
	for _, x := range hints {
		if x.ID == d.h.ID() || d.gate.denied(x.ID) || slices.Contains(known, x.ID) {
			continue
		}
		d.hint(ctx, x)
		wg.Go(func() {
			if err := d.h.Connect(ctx, x.AddrInfo()); err != nil {
				mu.Lock()
				if _, seen := unreachable[x.ID]; !seen {
					unreachable[x.ID] = err
				}
				mu.Unlock()
				return
			}
			if _, err := d.eng.QueryCapabilities(ctx, x.ID); err == nil {
				mu.Lock()
				out = append(out, x.ID)
				delete(unreachable, x.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out, unreachable
}

// Why a known peer cannot be reached.
var (
	// errNoAddrs: nothing gave the peer's addresses (a gossiped advert
	// names none) and the DHT is off.
	errNoAddrs = errors.New("no address known for it (gossip adverts carry none) and the DHT is off")
	// errNotInDHT: the peerstore has no address and the DHT found none.
	errNotInDHT = errors.New("no address known for it, and the DHT does not know it")
)

// reach connects to p unless it is connected already: at the addresses the
// peerstore holds, else (or when those fail) at the addresses the DHT
// finds, which are then kept like any other hint's.
func (d *discoverer) reach(ctx context.Context, p peer.ID) error {
	if d.h.Network().Connectedness(p) == network.Connected {
		return nil
	}
	var dialErr error
	if len(d.h.Peerstore().Addrs(p)) > 0 {
		dctx, cancel := context.WithTimeout(ctx, reachDialTimeout)
		dialErr = d.h.Connect(dctx, peer.AddrInfo{ID: p})
		cancel()
		if dialErr == nil {
			return nil
		}
	}
	if d.dht == nil {
		if dialErr != nil {
			return dialErr
		}
		return errNoAddrs
	}
	ai, err := d.dht.FindPeer(ctx, p)
	if err != nil || len(ai.Addrs) == 0 {
		if dialErr != nil {
			return fmt.Errorf("%w; the DHT found no other address: %v", dialErr, err)
		}
		return fmt.Errorf("%w (%v)", errNotInDHT, err)
	}
	d.hint(ctx, discovery.Hint{ID: p, Addrs: ai.Addrs, Source: discovery.SourceDHT})
	dctx, cancel := context.WithTimeout(ctx, reachDialTimeout)
	defer cancel()
	return d.h.Connect(dctx, ai)
}

// sourcesOf returns the sources that named p: this run's, and those the
// store remembers from earlier runs that are still on (a peer found over
// mDNS before a restart with mdns = false is not shown as an mDNS find).
// A peer no source named, that connected to this node or that the DHT's
// traffic brought, is shown as "dht" when it is in the DHT's routing
// table, and as "inbound" when it dialed this node.
func (d *discoverer) sourcesOf(p peer.ID, stored []string) []string {
	set := map[string]bool{}
	for _, s := range stored {
		if d.sourceOn(discovery.Source(s)) {
			set[s] = true
		}
	}
	d.mu.Lock()
	for s := range d.sources[p] {
		set[string(s)] = true
	}
	d.mu.Unlock()
	if len(set) == 0 {
		switch {
		case d.dht != nil && d.dht.InRoutingTable(p):
			set[string(discovery.SourceDHT)] = true
		case slices.ContainsFunc(d.h.Network().ConnsToPeer(p), func(c network.Conn) bool { return c.Stat().Direction == network.DirInbound }):
			set["inbound"] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// sourceOn reports whether a source may still name peers in this run.
func (d *discoverer) sourceOn(s discovery.Source) bool {
	switch s {
	case discovery.SourceMDNS:
		return d.cfg.MDNS
	case discovery.SourceDNSSD:
		return len(d.cfg.DNSSDDomains) > 0
	case discovery.SourceDHT:
		return d.dht != nil
	case discovery.SourceGossip:
		return d.gossip != nil
	}
	return true // static, and anything an older version wrote
}

func (d *discoverer) lastHeard(p peer.ID) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	var t time.Time
	for _, at := range d.sources[p] {
		if at.After(t) {
			t = at
		}
	}
	return t
}

func (n *Node) discoverer() *discoverer {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.disc
}

// handleDiscovery serves GET /discovery[?profile=NAME].
func (n *Node) handleDiscovery(w http.ResponseWriter, r *http.Request) {
	d := n.discoverer()
	profile := r.URL.Query().Get("profile")
	if profile != "" {
		if err := protocol.CheckProfileName(profile); err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
	}
	var providers map[peer.ID]bool
	var unreachable map[peer.ID]error
	if profile != "" {
		providers = map[peer.ID]bool{}
		var found []peer.ID
		found, unreachable = d.providers(r.Context(), profile)
		for _, p := range found {
			providers[p] = true
		}
	}
	stored, err := d.st.ListPeers()
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	known := d.eng.KnownCapabilities()
	byID := map[peer.ID]store.Peer{}
	for _, p := range stored {
		byID[p.ID] = p
	}
	for p := range known {
		if _, ok := byID[p]; !ok {
			byID[p] = store.Peer{ID: p}
		}
	}
	out := api.Discovery{
		Peers: []api.DiscoveredPeer{}, Dropped: d.counters.Snapshot(), Rejected: d.eng.CapabilityRejections(),
	}
	if d.dht != nil {
		out.DHTMode = d.dht.Mode()
	}
	for _, id := range slices.SortedFunc(maps.Keys(byID), func(a, b peer.ID) int { return strings.Compare(a.String(), b.String()) }) {
		if id == d.h.ID() {
			continue
		}
		p := byID[id]
		if _, why := unreachable[id]; providers != nil && !providers[id] && !why {
			continue
		}
		e := api.DiscoveredPeer{
			ID: id.String(), Sources: d.sourcesOf(id, p.Sources), Addrs: p.Addrs, Trust: p.Trust,
			Access: p.Access, Connected: d.h.Network().Connectedness(id) == network.Connected,
			Profiles: []string{}, LastSeen: p.LastSeen, Provider: providers[id],
		}
		if err := unreachable[id]; err != nil {
			e.Unreachable = oneLine(err.Error())
		}
		if t := d.lastHeard(id); t.After(e.LastSeen) {
			e.LastSeen = t
		}
		if k, ok := known[id]; ok {
			e.Profiles = profileNamesOf(k.Assertion)
			e.Capability = k.Source
			e.Load = &api.Load{Active: k.Assertion.Capacity.Active, FreeSlots: k.Assertion.Capacity.FreeSlots}
			e.Expires = k.Assertion.ExpiresAt
			issued := k.Assertion.IssuedAt
			e.Issued = &issued
		}
		if rtt := d.h.Peerstore().LatencyEWMA(id); rtt > 0 {
			v := api.Duration(rtt)
			e.RTT = &v
		}
		out.Peers = append(out.Peers, e)
	}
	writeJSON(w, http.StatusOK, out)
}
