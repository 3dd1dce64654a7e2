package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	"golang.org/x/sync/errgroup"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/delegation/plan"
	"github.com/kithmesh/kith/gpu"
	"github.com/kithmesh/kith/internal/backoff"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// ErrListen: the host could not listen on one of the configured addresses
// (the port is taken, the address is not this machine's, ...). A node
// never runs on some of its addresses only.
var ErrListen = errors.New("node: cannot listen")

// listen makes h listen on every address, failing on the first that does
// not bind, by name: a daemon half-started on one transport would look
// healthy while peers fail to reach it on the other.
func listen(h host.Host, addrs []string) error {
	for _, s := range addrs {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return fmt.Errorf("%w on %s: %v", ErrListen, s, err)
		}
		if err := h.Network().Listen(a); err != nil {
			return fmt.Errorf("%w on %s: %v (is another kith daemon, or another program, using it? change listen in the config or pass --listen)", ErrListen, s, err)
		}
	}
	return nil
}

// Options are what a caller adds to the config file.
type Options struct {
	Logger *slog.Logger
	// LogLevel, when set, is the level of Logger's handler: a reload sets
	// it to the file's log_level.
	LogLevel *slog.LevelVar
	// Override applies the daemon's command-line flags over the file on a
	// reload, as they were applied at start.
	Override func(*config.Config)
	// StoreLogger receives the database's own log (badger); nil: Logger.
	// The daemon gives it its own level (store.db_log_level).
	StoreLogger *slog.Logger
	// Trace sees every delegation message crossing the wire (kith demo).
	Trace delegation.Trace
	// Handlers are in-process Go handlers, registered as local profiles.
	Handlers map[string]executor.HandlerFunc
}

// Node is one kith node.
type Node struct {
	home string
	cfg  config.Config
	opts Options

	reloadMu sync.Mutex     // one Reload at a time
	live     *config.Config // the config as reloads applied it; nil: cfg
	log      *slog.Logger

	ready chan struct{}
	mu    sync.Mutex
	id    *crypto.Identity
	st    *store.Store
	host  host.Host
	eng   *delegation.Engine
	gater *gater
	disc  *discoverer
	plans *plan.Coordinator // plans.go

	gpuInv    gpu.Inventory
	ledger    *gpu.Ledger
	gpuReason string // why there is no ledger

	nat natState // what runNAT learned, for kith status

	httpLn  net.Listener // [api] listener; nil when off
	httpAPI *httpAPI

	metrics *nodeMetrics
}

// New checks the config and returns a node that Run will start. It does
// no I/O.
func New(home string, cfg config.Config, opts Options) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{home: home, cfg: cfg, opts: opts, log: opts.Logger.With("component", "node"), ready: make(chan struct{})}
	n.metrics = newNodeMetrics(n)
	return n, nil
}

// Ready is closed once Run has started everything and the API is serving.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Engine is the delegation engine; valid after Ready.
func (n *Node) Engine() *delegation.Engine {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.eng
}

// PeerID is the node's peer ID; valid after Ready.
func (n *Node) PeerID() peer.ID {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.id.PeerID()
}

// Host is the libp2p host; valid after Ready.
func (n *Node) Host() host.Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.host
}

// Store is the node's store; valid after Ready.
func (n *Node) Store() *store.Store {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st
}

// Addrs are the full multiaddrs (ending in /p2p/<id>) the host listens on,
// with the ports actually bound.
func (n *Node) Addrs() []string {
	h := n.Host()
	var out []string
	for _, a := range h.Addrs() {
		out = append(out, a.String()+"/p2p/"+h.ID().String())
	}
	slices.Sort(out)
	return out
}

// SocketPath is where the control API listens.
func (n *Node) SocketPath() string { return n.cfg.SocketPath(n.home) }

// Run starts the node and serves until ctx ends, then stops everything in
// order (API, engine, host, store) and returns.
func (n *Node) Run(ctx context.Context) (err error) {
	b, err := n.build()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.close()) }()
	return n.serve(ctx, b)
}

// built is what a node holds open while it runs: everything build made,
// and how to close it.
type built struct {
	id      *crypto.Identity
	st      *store.Store
	h       host.Host
	natSub  event.Subscription
	gate    *gater
	fnd     *finder
	eng     *delegation.Engine
	inv     gpu.Inventory
	ledger  *gpu.Ledger
	noGPU   string
	closers []func() error // in the order opened; close runs them backwards
}

func (b *built) onClose(f func() error) { b.closers = append(b.closers, f) }

// close releases what build opened, newest first.
func (b *built) close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i]())
	}
	return errors.Join(errs...)
}

// build opens the node's identity, store and libp2p host, listens, and
// makes the delegation engine. It starts nothing that runs on its own; on
// an error it closes what it opened.
func (n *Node) build() (_ *built, err error) {
	b := &built{}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.close())
		}
	}()
	if b.id, err = readIdentity(n.home); err != nil {
		return nil, err
	}
	b.st, err = store.Open(n.cfg.StorePath(n.home), store.Options{
		Logger: cmp.Or(n.opts.StoreLogger, n.opts.Logger), NoSync: !n.cfg.Store.Durable, MaxReplayEntries: n.cfg.Limits.ReplayCacheEntries,
		Contexts: n.cfg.Contexts.StoreLimits(),
		Metrics:  n.metrics.store,
	})
	if err != nil {
		return nil, err
	}
	b.onClose(b.st.Close)

	known, err := b.st.ListPeers()
	if err != nil {
		return nil, err
	}
	b.gate = newGater(n.cfg.Policy.Mode, known)
	rm, err := resourceManager(n.cfg.Limits)
	if err != nil {
		return nil, fmt.Errorf("node: resource manager: %w", err)
	}
	cm, err := connManager(n.cfg, known)
	if err != nil {
		return nil, err
	}
	b.h, err = libp2p.New(append([]libp2p.Option{
		libp2p.Identity(b.id.Libp2pKey()),
		libp2p.ConnectionGater(b.gate),
		libp2p.ResourceManager(rm),
		libp2p.DisableMetrics(), // see resourceManager
		libp2p.ConnectionManager(cm),
		// Listening happens below, address by address: libp2p's own
		// listen succeeds when any one address binds.
		libp2p.NoListenAddrs,
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Transport(quic.NewTransport),
		libp2p.UserAgent("kith/" + Version),
	}, n.natOptions(b.gate)...)...)
	if err != nil {
		_ = cm.Close()
		return nil, fmt.Errorf("node: libp2p host: %w", err)
	}
	b.onClose(b.h.Close)
	if err := listen(b.h, n.cfg.Listen); err != nil {
		return nil, err
	}
	if b.natSub, err = natEvents(b.h); err != nil {
		return nil, fmt.Errorf("node: event subscription: %w", err)
	}
	b.onClose(b.natSub.Close)

	profs, err := profiles(n.cfg)
	if err != nil {
		return nil, err
	}
	b.fnd = &finder{h: b.h, st: b.st}
	var closeGPU func()
	b.inv, b.ledger, closeGPU, b.noGPU = openGPU(n.cfg.GPU)
	b.onClose(func() error { closeGPU(); return nil })
	if b.ledger == nil {
		n.log.Info("no GPU inventory; profiles that need VRAM will be refused", "reason", b.noGPU)
	}
	b.eng, err = delegation.New(delegation.Config{
		Identity: b.id, Store: b.st, Dialer: hostDialer{b.h, b.fnd}, Finder: b.fnd, Ledger: b.ledger,
		Latency:  b.h.Peerstore().LatencyEWMA,
		Profiles: profs, Trace: n.opts.Trace, Logger: n.opts.Logger, Registerer: n.metrics.reg,
		NoReoffer:           !n.cfg.GPU.ReofferPreempted,
		QueryTrust:          n.cfg.Policy.QueryTrust.Level(),
		OffersPerSecond:     n.cfg.Limits.OffersPerSecond,
		OfferBurst:          n.cfg.Limits.OfferBurst,
		QueriesPerSecond:    n.cfg.Limits.QueriesPerSecond,
		QueryBurst:          n.cfg.Limits.QueryBurst,
		MaxRemoteConcurrent: n.cfg.Limits.MaxRemoteConcurrent,
		MaxUntrustedRemote:  untrustedSlots(n.cfg.Limits.UntrustedRemoteSlots),
		DefaultTimeout:      n.cfg.Limits.DefaultTimeout.Std(),
		MaxTimeout:          n.cfg.Limits.MaxTimeout.Std(),
		DefaultHopLimit:     uint32(n.cfg.Limits.DefaultHopLimit),
		Conn: protocol.ConnOptions{
			MaxFrame:  n.cfg.Limits.MaxFrameBytes,
			IOTimeout: n.cfg.Limits.StreamIdleTimeout.Std(),
			MaxSkew:   n.cfg.Limits.EnvelopeMaxSkew.Std(),
		},
	})
	if err != nil {
		return nil, err
	}
	for name, hf := range n.opts.Handlers {
		// Go handlers spend what they like: like every executor but
		// echo, only named peers may use them.
		if err := b.eng.Register(name, hf, func(p *delegation.Profile) { p.MinTrust = NamedPeerTrust }); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// serve runs what build made until ctx ends: the API socket and HTTP
// listener, the engine, discovery, static peers, NAT upkeep. It owns every
// goroutine it starts and returns once they have all stopped.
func (n *Node) serve(ctx context.Context, b *built) error {
	id, st, h, eng := b.id, b.st, b.h, b.eng
	ln, err := listenSocket(n.SocketPath())
	if err != nil {
		return err
	}
	api := &http.Server{Handler: n.socketHandler(), ReadHeaderTimeout: 10 * time.Second}

	g, gctx := errgroup.WithContext(ctx)
	disc, err := newDiscoverer(gctx, n, h, st, eng, b.gate)
	if err != nil {
		ln.Close()
		return err
	}
	b.fnd.disc = disc

	n.mu.Lock()
	n.id, n.st, n.host, n.eng, n.gater, n.disc = id, st, h, eng, b.gate, disc
	n.gpuInv, n.ledger, n.gpuReason = b.inv, b.ledger, b.noGPU
	n.mu.Unlock()

	var httpSrv *http.Server
	var httpLn net.Listener
	if n.cfg.API.Enabled() {
		srv, hln, h, err := n.startHTTPAPI()
		if err != nil {
			ln.Close()
			return err
		}
		httpSrv, httpLn = srv, hln
		n.mu.Lock()
		n.httpLn, n.httpAPI = hln, h
		n.mu.Unlock()
	}

	engCtx, stopEngine := context.WithCancel(context.Background())
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(engCtx) }()
	// Requests are served once the engine runs: one that came sooner would
	// be refused as if the node were stopping. Until then they wait in the
	// listener's queue.
	<-eng.Started()
	if httpSrv != nil {
		g.Go(func() error { return serveHTTPAPI(httpSrv, httpLn) })
	}
	stopPlans := n.startPlans(eng, st, b.fnd)
	h.SetStreamHandler(protocol.ID, func(s network.Stream) {
		eng.HandleStream(s, s.Conn().RemotePeer())
	})
	h.Network().Notify(&network.NotifyBundle{ConnectedF: func(_ network.Network, c network.Conn) {
		n.seen(c.RemotePeer())
	}})

	g.Go(func() error {
		if err := api.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("node: api: %w", err)
		}
		return nil
	})
	g.Go(func() error { n.connectStatic(gctx, h, st); return nil })
	g.Go(func() error { n.maintain(gctx, st); return nil })
	g.Go(func() error { disc.run(gctx, n); return nil })
	g.Go(func() error { n.runNAT(gctx, h, b.natSub); return nil })
	n.log.Info("node started", "peer_id", id.PeerID(), "addrs", n.Addrs(), "socket", n.SocketPath(), "http", n.HTTPAddr())
	if a := n.HTTPAddr(); a != "" {
		n.log.Info("dashboard", "url", DashboardURL(a))
	}
	close(n.ready)

	<-gctx.Done()
	n.log.Info("node stopping")
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = api.Shutdown(shutCtx)
	if httpSrv != nil {
		_ = httpSrv.Shutdown(shutCtx)
	}
	h.RemoveStreamHandler(protocol.ID)
	plansErr := stopPlans()
	stopEngine()
	engErr := <-engDone
	gErr := g.Wait()
	_ = os.Remove(n.SocketPath())
	return errors.Join(plansErr, engErr, gErr)
}

// listenSocket listens on a unix socket that only this user can use. A
// stale socket from a crashed daemon is replaced; a live one means another
// daemon runs on this home.
func listenSocket(path string) (net.Listener, error) {
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("node: a daemon already serves %s", path)
	}
	_ = os.Remove(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("node: api socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("node: api socket permissions: %w", err)
	}
	return ln, nil
}

type hostDialer struct {
	h   host.Host
	fnd *finder // to look up the addresses of a peer known by ID alone
}

func (d hostDialer) OpenStream(ctx context.Context, p peer.ID) (delegation.Stream, error) {
	markDelegate(d.h.ConnManager(), p)
	if d.fnd.disc != nil && d.h.Network().Connectedness(p) != network.Connected && len(d.h.Peerstore().Addrs(p)) == 0 {
		// A peer known from a gossiped advert, or named by ID alone: find
		// its addresses (the DHT) first, or say why there are none.
		if err := d.fnd.disc.reach(ctx, p); err != nil {
			return nil, fmt.Errorf("node: reach %s: %w", p, err)
		}
	}
	// The engine paces its own tries (a reattach waits at most 5 s between
	// them); libp2p's dial backoff, which grows to minutes after repeated
	// failures, would leave a path that came back (a restarted relay)
	// unused until long after a delegation's deadline.
	clearDialBackoff(d.h, p)
	// A peer behind NAT may be reachable only through a relay (a limited
	// connection); libp2p still opens new streams on a direct connection
	// whenever there is one.
	return d.h.NewStream(network.WithAllowLimitedConn(ctx, "kith delegation"), p, protocol.ID)
}

// finder offers as candidates every known peer that is not denied, and
// the providers of the profile that discovery knows or finds in the DHT.
type finder struct {
	h    host.Host
	st   *store.Store
	disc *discoverer
}

func (f *finder) Candidates(ctx context.Context, profile string) []peer.ID {
	seen := map[peer.ID]bool{}
	var out []peer.ID
	if f.disc != nil {
		found, _ := f.disc.providers(ctx, profile)
		for _, p := range found {
			seen[p] = true
			out = append(out, p)
		}
	}
	peers, _ := f.st.ListPeers()
	for _, p := range peers {
		if p.Access != store.AccessDeny && !seen[p.ID] {
			seen[p.ID] = true
			out = append(out, p.ID)
		}
	}
	for _, p := range f.h.Network().Peers() {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// AddPeer records a static peer (full multiaddr with /p2p/) and connects.
func AddPeerToStore(st *store.Store, addr string, source string) (peer.AddrInfo, error) {
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("peer address %q: %w (want a full multiaddr ending in /p2p/<peer id>)", addr, err)
	}
	_, err = st.UpdatePeer(ai.ID, func(p *store.Peer) error {
		for _, a := range ai.Addrs {
			if !slices.Contains(p.Addrs, a.String()) {
				p.Addrs = append(p.Addrs, a.String())
			}
		}
		if !slices.Contains(p.Sources, source) {
			p.Sources = append(p.Sources, source)
		}
		return nil
	})
	return *ai, err
}

// addConfigPeer records a static peer of the config. Naming a peer there
// is naming it to kith, as "kith peers add" is, so a peer that becomes
// static here is raised to NamedPeerTrust; one that already was keeps the
// trust it has, so a trust the user lowered later is not raised again at
// every start.
func addConfigPeer(st *store.Store, addr string) error {
	ai, err := peer.AddrInfoFromString(addr)
	if err != nil {
		return fmt.Errorf("peer address %q: %w (want a full multiaddr ending in /p2p/<peer id>)", addr, err)
	}
	rec, err := st.GetPeer(ai.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	wasStatic := err == nil && slices.Contains(rec.Sources, "static")
	if _, err := AddPeerToStore(st, addr, "static"); err != nil {
		return err
	}
	if !wasStatic {
		_, err = st.RaiseTrust(ai.ID, NamedPeerTrust, "config peers")
	}
	return err
}

// connectStatic records the config's static peers, puts every stored
// peer's addresses in the peerstore, and dials them, retrying those that
// fail with a growing interval.
func (n *Node) connectStatic(ctx context.Context, h host.Host, st *store.Store) {
	for _, a := range n.cfg.Peers {
		if err := addConfigPeer(st, a); err != nil {
			n.log.Warn("static peer", "addr", a, "err", err)
		}
	}
	// Peers that failed are redialled on a growing schedule; once all are
	// connected, the list is checked again every staticRecheck.
	bo := backoff.Backoff{Initial: time.Second, Max: staticRecheck}
	for {
		peers, _ := st.ListPeers()
		missing := 0
		for _, p := range peers {
			if p.Access == store.AccessDeny || p.ID == h.ID() {
				continue
			}
			var addrs []ma.Multiaddr
			for _, s := range p.Addrs {
				if a, err := ma.NewMultiaddr(s); err == nil {
					addrs = append(addrs, a)
				}
			}
			h.Peerstore().AddAddrs(p.ID, addrs, peerstore.PermanentAddrTTL)
			if h.Network().Connectedness(p.ID) == network.Connected || len(addrs) == 0 {
				continue
			}
			// A failed dial backs the address off for seconds in the
			// swarm; a static peer that was still booting (the hub of a
			// star, restarted) must be redialled on this schedule.
			clearDialBackoff(h, p.ID)
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := h.Connect(dctx, peer.AddrInfo{ID: p.ID, Addrs: addrs}); err != nil {
				missing++
				n.log.Debug("connect peer", "peer", p.ID, "err", err)
			}
			cancel()
		}
		wait := staticRecheck
		if missing > 0 {
			wait = bo.Next()
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// staticRecheck is how often connectStatic looks for stored peers that are
// not connected, and the longest wait between two dials of one that fails.
const staticRecheck = 30 * time.Second

// ConnectNow dials a peer right away (after kith peers add).
func (n *Node) connectNow(ai peer.AddrInfo) {
	h := n.Host()
	h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.PermanentAddrTTL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Connect(ctx, ai); err != nil {
		n.log.Info("connect new peer", "peer", ai.ID, "err", err)
	}
}

func (n *Node) seen(p peer.ID) {
	st := n.Store()
	if st == nil {
		return
	}
	_, _ = st.UpdatePeer(p, func(rec *store.Peer) error {
		rec.LastSeen = time.Now()
		return nil
	})
}

// maintain prunes expired replay entries and contexts past their bounds,
// and reclaims disk space.
func (n *Node) maintain(ctx context.Context, st *store.Store) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if _, err := st.PruneReplay(now); err != nil {
				n.log.Warn("prune replay cache", "err", err)
			}
			if _, err := st.PruneContexts(); err != nil {
				n.log.Warn("prune contexts", "err", err)
			}
			_ = st.CollectGarbage()
		}
	}
}

// untrustedSlots maps untrusted_remote_slots to the engine's setting, where
// 0 means the default and a negative count means none.
func untrustedSlots(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// clearDialBackoff forgets libp2p's dial backoff for p and for the relays
// of p's circuit addresses, so the next dial tries every address now.
func clearDialBackoff(h host.Host, p peer.ID) {
	sw, ok := h.Network().(*swarm.Swarm)
	if !ok {
		return
	}
	sw.Backoff().Clear(p)
	for _, a := range h.Peerstore().Addrs(p) {
		if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err != nil {
			continue
		}
		if v, err := a.ValueForProtocol(ma.P_P2P); err == nil {
			if relay, err := peer.Decode(v); err == nil {
				sw.Backoff().Clear(relay)
			}
		}
	}
}
