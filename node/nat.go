package node

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kithmesh/kith/node/config"
)

const (
	// relayRetry is how long auto-relay leaves a relay alone after a
	// reservation there failed (relay down, or not yet allowing this
	// node). go-libp2p's default is an hour; a home lab fixes such things
	// in minutes.
	relayRetry = 30 * time.Second

	// relayedGrace is how long a relayed connection to a peer outlives the
	// first direct one: time for the hole punch exchange and any short
	// stream already on it to finish. Streams still open then are reset; a
	// delegation's requester reattaches over the direct connection.
	relayedGrace = 5 * time.Second

	// natSweep is how often runNAT looks for relayed connections to close
	// and forgets what closed connections observed.
	natSweep = time.Second

	// punchReadyWait is how long after relay_boot_delay auto-relay may
	// wait for the hole punching service to start (go-libp2p looks for a
	// public address at most every 5 s).
	punchReadyWait = 6 * time.Second

	// relayDialTimeout bounds the first connection to the static relays.
	relayDialTimeout = 10 * time.Second

	// relayRecheck is how often auto-relay may look at the static relays
	// again while it holds fewer reservations than there are relays: a
	// relay that comes back is reserved on within that (go-libp2p's
	// default, 30 s, is for relays found in a large DHT).
	relayRecheck = 2 * time.Second

	// relayPingEvery and relayPingTimeout: how often each connected static
	// relay is pinged, and how long a ping may take before the connection
	// counts as dead and is closed. A relay that dies says nothing on QUIC,
	// whose connection would otherwise linger until its idle timeout
	// (30 s), and auto-relay would keep handing out circuit addresses
	// through it until then.
	relayPingEvery   = 2 * time.Second
	relayPingTimeout = 3 * time.Second
)

// natOptions are the host options of [nat]: AutoNAT v2, hole punching,
// relay client and service, auto-relay, port mapping.
//
// A node with relay = true is declared publicly reachable (it is the
// small VPS of the set-up): AutoNAT cannot confirm that before some peer
// offers the AutoNAT v1 service, and libp2p starts the relay service only
// on a public node. Such a node also answers other nodes' AutoNAT v1
// questions, so the nodes behind NAT learn that they are private, and the
// DHT's "auto" mode makes it a server.
func (n *Node) natOptions(gate *gater) []libp2p.Option {
	c := n.cfg.NAT
	refusals := newRefusalLog(n.log)
	refusals.counted = n.metrics.peersRefused
	gate.refused = func(p peer.ID, a network.ConnMultiaddrs) { refusals.log(p, "connection", a.RemoteMultiaddr()) }
	opts := []libp2p.Option{
		libp2p.EnableAutoNATv2(),
		libp2p.EnableHolePunching(holepunch.WithMetricsAndEventTracer(holepunch.NewMetricsTracer(), punchTracer{n})),
		libp2p.EnableRelay(),
		libp2p.AddrsFactory(n.addrsFactory),
	}
	if c.PortMapping {
		opts = append(opts, libp2p.NATPortMap())
	}
	if c.Relay {
		opts = append(opts,
			libp2p.ForceReachabilityPublic(),
			libp2p.EnableNATService(),
			libp2p.EnableRelayService(
				relayv2.WithResources(relayResources(c, n.cfg.Policy.Mode)),
				relayv2.WithACL(relayACL{gate, refusals}),
				relayv2.WithMetricsTracer(relayTracer{n.metrics})),
		)
		if len(c.Relays) > 0 {
			n.log.Info("[nat] relays ignored: a relay node is public and reserves no slot elsewhere")
		}
	} else if relays := staticRelays(c.Relays); len(relays) > 0 {
		opts = append(opts, libp2p.EnableAutoRelayWithStaticRelays(relays,
			autorelay.WithBootDelay(c.RelayBootDelay.Std()),
			autorelay.WithBackoff(relayRetry),
			autorelay.WithMinInterval(relayRecheck)))
	}
	return opts
}

// relayResources are the relay service's limits from [nat]; the rest keeps
// go-libp2p's defaults (a reservation lasts an hour and is refreshed).
// go-libp2p also caps reservations per IP address (8) and per AS (32),
// against one party filling the relay; in allowlist mode every holder is
// a peer the owner allowed by name, and a home lab has more than 8
// machines behind one address, so there only the total counts.
func relayResources(c config.NAT, policyMode config.PolicyMode) relayv2.Resources {
	r := relayv2.DefaultResources()
	r.MaxReservations = c.RelayMaxReservations
	r.MaxCircuits = c.RelayMaxCircuits
	if policyMode == config.PolicyAllowlist {
		r.MaxReservationsPerIP = c.RelayMaxReservations
		r.MaxReservationsPerASN = c.RelayMaxReservations
	}
	r.Limit = &relayv2.RelayLimit{
		Duration: c.RelayCircuitDuration.Std(),
		Data:     int64(c.RelayCircuitMiB) << 20,
	}
	return r
}

// staticRelays parses [nat] relays (Validate has checked them), merging
// the addresses of a relay listed more than once.
func staticRelays(addrs []string) []peer.AddrInfo {
	var mas []ma.Multiaddr
	for _, s := range addrs {
		if a, err := ma.NewMultiaddr(s); err == nil {
			mas = append(mas, a)
		}
	}
	ais, err := peer.AddrInfosFromP2pAddrs(mas...)
	if err != nil {
		return nil
	}
	return ais
}

// relayACL makes the relay service serve only peers the connection gater
// admits: in allowlist mode the allowed ones, in open mode any that is not
// denied. The gater already refuses other peers' connections; the relay
// asks again for every reservation and every circuit, so that it never
// relays for a peer the list no longer admits, whatever connection that
// peer still holds.
type relayACL struct {
	g   *gater
	log *refusalLog
}

// AllowReserve admits a reservation from a peer the gater admits.
func (a relayACL) AllowReserve(p peer.ID, addr ma.Multiaddr) bool {
	if a.g.admits(p) {
		return true
	}
	a.log.log(p, "relay reservation", addr)
	return false
}

// AllowConnect admits a circuit when the gater admits both ends.
func (a relayACL) AllowConnect(src peer.ID, addr ma.Multiaddr, dest peer.ID) bool {
	switch {
	case !a.g.admits(src):
		a.log.log(src, "relayed connection", addr)
		return false
	case !a.g.admits(dest):
		a.log.log(dest, "relayed connection to it", addr)
		return false
	}
	return true
}

// refusalLog logs, at info level, the peers refused because the
// allow/deny lists do not admit them: a relay owner who forgot "kith peers
// allow" sees which peer knocked. At most refusalBurst lines, then one per
// refusalEvery; what that drops is counted into the next line.
type refusalLog struct {
	l       *slog.Logger
	lim     *rate.Limiter
	dropped atomic.Uint64
	counted *prometheus.CounterVec // kith_peers_refused_total, by what
}

const (
	refusalEvery = time.Second
	refusalBurst = 5
)

func newRefusalLog(l *slog.Logger) *refusalLog {
	return &refusalLog{l: l, lim: rate.NewLimiter(rate.Every(refusalEvery), refusalBurst)}
}

func (r *refusalLog) log(p peer.ID, what string, addr ma.Multiaddr) {
	if r.counted != nil {
		r.counted.WithLabelValues(strings.ReplaceAll(what, " ", "_")).Inc()
	}
	if !r.lim.Allow() {
		r.dropped.Add(1)
		return
	}
	r.l.Info("refused a peer that is not allowed", "peer", p, "what", what, "addr", addr,
		"not_logged_since_last", r.dropped.Swap(0))
}

// natState is what the node has learned about how peers reach it, for
// "kith status". runNAT and the hole punch tracer write it; the zero value
// is ready (reachability and NAT types unknown).
type natState struct {
	mu           sync.Mutex
	reachability network.Reachability
	natTCP       network.NATDeviceType
	natUDP       network.NATDeviceType
	relayAddrs   []ma.Multiaddr
	reachable    []ma.Multiaddr
	unreachable  []ma.Multiaddr
	observed     map[network.Conn]ma.Multiaddr // our address as the far end of each connection sees it
	learned      map[string]ma.Multiaddr       // by transport: what a relay saw on a side connection (natlearn.go)
	punches      map[peer.ID]holePunch         // the last hole punch with each peer
}

// holePunch is one attempt at a direct connection to a peer.
type holePunch struct {
	at      time.Time
	success bool
	elapsed time.Duration
	err     string
}

// natSnapshot is a copy of natState, read without holding its lock.
type natSnapshot struct {
	reachability           network.Reachability
	natTCP, natUDP         network.NATDeviceType
	relayAddrs             []ma.Multiaddr
	reachable, unreachable []ma.Multiaddr
	observed               map[string]int // address → how many peers see it
	punches                map[peer.ID]holePunch
}

func (s *natState) snapshot() natSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := natSnapshot{
		reachability: s.reachability, natTCP: s.natTCP, natUDP: s.natUDP,
		relayAddrs: s.relayAddrs, reachable: s.reachable, unreachable: s.unreachable,
		observed: make(map[string]int), punches: make(map[peer.ID]holePunch, len(s.punches)),
	}
	observers := make(map[string]map[peer.ID]bool)
	for c, a := range s.observed {
		if c.IsClosed() {
			continue
		}
		k := a.String()
		if observers[k] == nil {
			observers[k] = make(map[peer.ID]bool)
		}
		observers[k][c.RemotePeer()] = true
	}
	for a, ps := range observers {
		out.observed[a] = len(ps)
	}
	for _, a := range s.learned {
		if _, ok := out.observed[a.String()]; !ok {
			out.observed[a.String()] = 1
		}
	}
	for p, hp := range s.punches {
		out.punches[p] = hp
	}
	return out
}

// record takes in one event of runNAT's subscription.
func (s *natState) record(e any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e := e.(type) {
	case event.EvtLocalReachabilityChanged:
		s.reachability = e.Reachability
	case event.EvtNATDeviceTypeChanged:
		switch e.TransportProtocol {
		case network.NATTransportTCP:
			s.natTCP = e.NatDeviceType
		case network.NATTransportUDP:
			s.natUDP = e.NatDeviceType
		}
	case event.EvtAutoRelayAddrsUpdated:
		s.relayAddrs = slices.Clone(e.RelayAddrs)
	case event.EvtHostReachableAddrsChanged:
		s.reachable, s.unreachable = slices.Clone(e.Reachable), slices.Clone(e.Unreachable)
	case event.EvtPeerIdentificationCompleted:
		// What a peer sees of a relayed connection is the relay's
		// circuit, not us.
		if e.ObservedAddr != nil && e.Conn != nil && !isRelayed(e.Conn) && !e.Conn.IsClosed() {
			if s.observed == nil {
				s.observed = make(map[network.Conn]ma.Multiaddr)
			}
			s.observed[e.Conn] = e.ObservedAddr
		}
	}
}

func (s *natState) punched(p peer.ID, hp holePunch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.punches == nil {
		s.punches = make(map[peer.ID]holePunch)
	}
	s.punches[p] = hp
}

// prune forgets closed connections and peers no longer connected.
func (s *natState) prune(h host.Host) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.observed {
		if c.IsClosed() {
			delete(s.observed, c)
		}
	}
	for p := range s.punches {
		if h.Network().Connectedness(p) == network.NotConnected {
			delete(s.punches, p)
		}
	}
}

// punchSteps are the steps' metric labels.
var punchSteps = map[string]string{"hole punch": "hole_punch", "direct dial": "direct_dial", "hole punch exchange": "exchange"}

// punchTracer hears go-libp2p's hole punching service: it logs every
// outcome and keeps the last one per peer for "kith status".
type punchTracer struct{ n *Node }

// Trace records how a hole punch, or the direct dial that may precede
// it, ended, and an exchange that failed before any punch.
func (t punchTracer) Trace(evt *holepunch.Event) {
	var hp holePunch
	var what string
	switch e := evt.Evt.(type) {
	case *holepunch.EndHolePunchEvt:
		what, hp = "hole punch", holePunch{success: e.Success, elapsed: e.EllapsedTime, err: e.Error}
	case *holepunch.DirectDialEvt:
		what, hp = "direct dial", holePunch{success: e.Success, elapsed: e.EllapsedTime, err: e.Error}
	case *holepunch.ProtocolErrorEvt:
		// The exchange over the relay failed, e.g. the peer's hole
		// punching service had not started: no punch was tried.
		what, hp = "hole punch exchange", holePunch{err: e.Error}
	default:
		return
	}
	hp.at = time.Unix(0, evt.Timestamp)
	t.n.metrics.punch(punchSteps[what], hp.success)
	t.n.nat.punched(evt.Remote, hp)
	hp.err = oneLine(hp.err)
	if hp.success {
		t.n.log.Info("direct connection to a relayed peer", "peer", evt.Remote, "via", what, "elapsed", hp.elapsed)
	} else {
		t.n.log.Info("no direct connection to a relayed peer yet", "peer", evt.Remote, "via", what, "elapsed", hp.elapsed, "err", hp.err)
	}
}

// natEvents subscribes to the events runNAT follows. Run subscribes as
// soon as the host exists, so that the addresses observed by the first
// connections (static peers, relays) are not missed.
func natEvents(h host.Host) (event.Subscription, error) {
	return h.EventBus().Subscribe([]any{
		new(event.EvtLocalReachabilityChanged),
		new(event.EvtNATDeviceTypeChanged),
		new(event.EvtAutoRelayAddrsUpdated),
		new(event.EvtHostReachableAddrsChanged),
		new(event.EvtPeerIdentificationCompleted),
	}, eventbus.Name("kith nat"), eventbus.BufSize(256))
}

// runNAT follows the host's reachability, observed addresses and relay
// reservations (sub, from natEvents) for "kith status", starts auto-relay
// once the boot delay has passed with the reachability still unknown, and
// closes relayed connections that a direct one has replaced. It returns
// when ctx ends.
func (n *Node) runNAT(ctx context.Context, h host.Host, sub event.Subscription) {
	// Auto-relay starts looking for a reservation only when AutoNAT
	// announces a reachability, and go-libp2p's AutoNAT v1 announces none
	// until a peer that offers the AutoNAT service has dialed it back
	// (not before 15 s, and never in a home lab where no node offers it).
	// So a node with static relays that still knows nothing after
	// relay_boot_delay announces "unknown" itself, which is what it is.
	//
	// Before that it connects to the relays, and waits (a little) until
	// its hole punching service is ready: that service starts once the
	// node knows a public address of its own (which a relay tells it), and
	// it never punches for a relayed connection that arrived before.
	var boot <-chan time.Time
	if c := n.cfg.NAT; len(c.Relays) > 0 && !c.Relay {
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() { n.dialRelays(ctx, h) })
		wg.Go(func() { n.watchRelays(ctx, h) })
		wg.Go(func() { n.learnAddrs(ctx, h) })
		t := time.NewTimer(c.RelayBootDelay.Std())
		defer t.Stop()
		boot = t.C
	}
	heard, pending := false, false
	var announceBy time.Time
	announce := func(now time.Time) {
		switch {
		case !pending:
		case heard:
			pending = false // AutoNAT has spoken; auto-relay follows it
		case holePunchReady(h) || !now.Before(announceBy):
			pending = false
			n.announceUnknown(h)
		}
	}
	sweep := time.NewTicker(natSweep)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			if r, ok := e.(event.EvtLocalReachabilityChanged); ok {
				heard = true
				n.log.Info("reachability", "reachability", r.Reachability)
			}
			n.nat.record(e)
		case now := <-boot:
			boot = nil
			pending, announceBy = true, now.Add(punchReadyWait)
			announce(now)
		case now := <-sweep.C:
			announce(now)
			n.closeReplacedRelayed(h, now)
			n.nat.prune(h)
		}
	}
}

// dialRelays connects to the static relays, so that the node learns its
// public address from them (identify) right away.
func (n *Node) dialRelays(ctx context.Context, h host.Host) {
	ctx, cancel := context.WithTimeout(ctx, relayDialTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, ai := range staticRelays(n.cfg.NAT.Relays) {
		wg.Go(func() {
			if err := h.Connect(ctx, ai); err != nil {
				n.log.Info("relay not reachable yet", "relay", ai.ID, "err", err)
			}
		})
	}
	wg.Wait()
}

// watchRelays pings each connected static relay every relayPingEvery and
// closes the connections to one that does not answer within
// relayPingTimeout: auto-relay then drops its circuit addresses at once
// and looks for a reservation again (every relayRecheck).
func (n *Node) watchRelays(ctx context.Context, h host.Host) {
	relays := staticRelays(n.cfg.NAT.Relays)
	t := time.NewTicker(relayPingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for _, ai := range relays {
			if h.Network().Connectedness(ai.ID) != network.Connected {
				continue
			}
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, relayPingTimeout)
				defer cancel()
				if _, err := pingOnce(pctx, h, ai.ID); err != nil && ctx.Err() == nil {
					n.log.Info("relay not answering; closing its connections", "relay", ai.ID, "err", err)
					_ = h.Network().ClosePeer(ai.ID)
				}
			})
		}
		wg.Wait()
	}
}

// holePunchReady reports whether go-libp2p's hole punching service has
// started: it registers its protocol once the node has a public address.
func holePunchReady(h host.Host) bool {
	return slices.Contains(h.Mux().Protocols(), holepunch.Protocol)
}

// announceUnknown emits "reachability unknown" on the host's event bus,
// which starts auto-relay.
func (n *Node) announceUnknown(h host.Host) {
	em, err := h.EventBus().Emitter(new(event.EvtLocalReachabilityChanged), eventbus.Stateful)
	if err != nil {
		n.log.Warn("nat: cannot start auto-relay", "err", err)
		return
	}
	defer em.Close()
	n.log.Info("reachability still unknown; reserving a slot on the configured relays", "relays", len(n.cfg.NAT.Relays))
	if err := em.Emit(event.EvtLocalReachabilityChanged{Reachability: network.ReachabilityUnknown}); err != nil {
		n.log.Warn("nat: cannot start auto-relay", "err", err)
	}
}

// closeReplacedRelayed closes the relayed connections to every peer that
// has had a direct connection for relayedGrace. New streams already prefer
// the direct connection; closing the relayed one moves the streams still
// on it (they reattach) and frees the relay's slot and data allowance.
func (n *Node) closeReplacedRelayed(h host.Host, now time.Time) {
	byPeer := make(map[peer.ID][]network.Conn)
	for _, c := range h.Network().Conns() {
		byPeer[c.RemotePeer()] = append(byPeer[c.RemotePeer()], c)
	}
	for p, conns := range byPeer {
		direct := slices.ContainsFunc(conns, func(c network.Conn) bool {
			return !isRelayed(c) && now.Sub(c.Stat().Opened) >= relayedGrace
		})
		if !direct {
			continue
		}
		for _, c := range conns {
			if isRelayed(c) {
				n.log.Info("closing relayed connection: a direct one replaced it", "peer", p, "relayed", c.RemoteMultiaddr())
				_ = c.Close()
			}
		}
	}
}

// isRelayed reports whether c goes through a circuit relay.
func isRelayed(c network.Conn) bool { return isCircuit(c.RemoteMultiaddr()) }

func isCircuit(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}
