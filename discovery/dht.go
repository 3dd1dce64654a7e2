package discovery

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	dhtpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	p2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/core/routing"
	"github.com/libp2p/go-msgio"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/multiformats/go-multihash"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// DHT modes, as named in the config.
const (
	// DHTModeAuto answers DHT queries unless AutoNAT has found the node
	// private (behind NAT, unreachable from the peers that checked), and
	// only asks then. A node whose reachability is unknown serves: on a
	// LAN, or in a lab with no public node to run AutoNAT against, AutoNAT
	// never decides, and a DHT in which every node waited for "public"
	// would have no server at all.
	DHTModeAuto = "auto"
	// DHTModeServer always answers DHT queries and stores provider records,
	// even behind NAT.
	DHTModeServer = "server"
	// DHTModeClient only asks: other nodes never put it in their routing
	// tables or send it queries.
	DHTModeClient = "client"
)

// DHTProtocolPrefix is the prefix of the private DHT's protocol IDs: it
// speaks /kith/kad/1.0.0, so it never mixes with the public IPFS DHT.
const DHTProtocolPrefix = "/kith"

// kadProtocol is the one protocol the DHT speaks, and the stream handler a
// server registers.
const kadProtocol = p2pprotocol.ID(DHTProtocolPrefix + "/kad/1.0.0")

// DefaultReprovideInterval is how often the local profiles are advertised
// again. Provider records live 48 hours on the nodes that store them, so
// this leaves room for several failed rounds before any record expires.
const DefaultReprovideInterval = 12 * time.Hour

const (
	// maxReprovideInterval: provider records expire after this long
	// (kad-dht's ProvideValidity), so re-advertising any slower lets them
	// lapse.
	maxReprovideInterval = 48 * time.Hour
	// profileCheckInterval is how often Run asks whether the local profiles
	// changed.
	profileCheckInterval = time.Minute
	// advertiseRetry is how soon Run tries again after a round that failed,
	// when the routing table has not grown in the meantime (growth triggers
	// a round at once, see routingTableCheck).
	advertiseRetry = 30 * time.Second
	// routingTableCheck is how often Run looks at the routing table's size:
	// a round is due as soon as the table gains peers after a failed round,
	// or while it is smaller than one bucket (a small mesh, still forming,
	// where each new server may be one of the closest to a profile key).
	routingTableCheck = 250 * time.Millisecond
	// regrowAdvertiseGap is the least time between two rounds that the
	// routing table's growth triggers.
	regrowAdvertiseGap = 2 * time.Second
	// smallTable is the routing-table size below which growth triggers a
	// round: kad-dht's bucket size, the number of servers a record is put
	// on.
	smallTable = 20
	// advertiseTimeout bounds one round of provider puts.
	advertiseTimeout = 2 * time.Minute
	// defaultFindLimit is FindProviders' limit when the caller gives none:
	// one Kademlia bucket.
	defaultFindLimit = 20
	// maxHintAddrs caps the addresses kept from one provider record; a DHT
	// server chooses what it returns, and a hint needs only a few.
	maxHintAddrs = 32
	// maxBootstrapPeers caps the fallback peers kept for kad-dht; the
	// first ones given (static peers, stored peers) are the ones kept.
	maxBootstrapPeers = 256
	// routingTableWait bounds how long Bootstrap waits for a freshly
	// connected DHT server to enter the routing table before refreshing.
	routingTableWait = 5 * time.Second
	// nearProbes is how many connected DHT servers FindProviders asks
	// directly, beside kad-dht's lookup: the ones closest to the key
	// (see FindProviders).
	nearProbes = 3
	// probeTimeout bounds one direct question to a connected server.
	probeTimeout = 10 * time.Second
	// keptBuckets: the peers of the routing table's keptBuckets widest
	// buckets (those sharing fewer leading bits with this node's key)
	// are kept connected (keep). kad-dht protects the same peers from
	// this node's connection manager.
	keptBuckets = 2
	// keepInterval is how often keep looks for kept peers that are not
	// connected, besides when one disconnects.
	keepInterval = 30 * time.Second
	// keepRetry is the first wait before a failed redial is tried again.
	keepRetry = time.Second
	// keepDials bounds the dials keep runs at once, and keepDialTimeout
	// each one.
	keepDials       = 8
	keepDialTimeout = 10 * time.Second
	// maxDroppedSeen caps the bad provider IDs one FindProviders
	// remembers so as to count each once.
	maxDroppedSeen = 1024
	// maxKadMessage caps an answer read from a DHT server: kad-dht's own
	// cap on the messages it reads.
	maxKadMessage = network.MessageSizeMax
)

// Errors returned by the DHT.
var (
	// ErrDHTConfig: a DHTConfig field is out of range.
	ErrDHTConfig = errors.New("discovery: invalid DHT config")
	// ErrNoDHTPeers: after Bootstrap the routing table is still empty, so
	// nothing can be advertised or found yet.
	ErrNoDHTPeers = errors.New("discovery: no DHT server reachable")
)

// DHTConfig configures the private Kademlia DHT.
type DHTConfig struct {
	// Mode is DHTModeAuto (the default when empty), DHTModeServer or
	// DHTModeClient.
	Mode string
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// Counters counts provider records dropped as malformed, under
	// "dht/<reason>"; nil keeps a private set.
	Counters *Counters
	// ReprovideInterval is how often Run advertises the local profiles
	// again. Zero means DefaultReprovideInterval; it must stay under the 48
	// hours a provider record lives.
	ReprovideInterval time.Duration

	// Tests only.
	profileCheck time.Duration   // Run's profile check interval; zero means profileCheckInterval
	kadOptions   []kaddht.Option // appended to the kad-dht options
}

// DHT is the private Kademlia DHT: one provider record per local profile,
// and provider lookups for profiles no other source listed. Everything it
// returns is a Hint.
type DHT struct {
	h            host.Host
	kad          *kaddht.IpfsDHT
	log          *slog.Logger
	counters     *Counters
	reprovide    time.Duration
	profileCheck time.Duration

	mu        sync.Mutex
	bootstrap map[peer.ID]peer.AddrInfo // peers Bootstrap was given, up to maxBootstrapPeers
}

// ProfileKey is the DHT key under which providers of the profile name are
// recorded: a raw CIDv1 of SHA-256("kith/profile/" + name).
func ProfileKey(name string) cid.Cid {
	sum := sha256.Sum256([]byte("kith/profile/" + name))
	mh, err := multihash.Encode(sum[:], multihash.SHA2_256)
	if err != nil {
		// Encoding a 32-byte SHA-256 digest cannot fail.
		panic("discovery: multihash of a sha256 digest: " + err.Error())
	}
	return cid.NewCidV1(cid.Raw, mh)
}

// NewDHT starts a kad-dht node on h with the /kith protocol prefix, provider
// records only (no values), in cfg.Mode. It dials nobody until Bootstrap.
//
// With the /kith prefix kad-dht applies no routing-table or query filters
// (those exist for the public /ipfs DHT), so LAN and loopback addresses
// count: that is what a home lab needs.
func NewDHT(ctx context.Context, h host.Host, cfg DHTConfig) (*DHT, error) {
	var mode kaddht.ModeOpt
	switch cfg.Mode {
	case "", DHTModeAuto:
		// kad-dht's ModeAuto serves only once AutoNAT says "public", which
		// never happens on a private network; ModeAutoServer serves until
		// AutoNAT says "private".
		mode = kaddht.ModeAutoServer
	case DHTModeServer:
		mode = kaddht.ModeServer
	case DHTModeClient:
		mode = kaddht.ModeClient
	default:
		return nil, fmt.Errorf("%w: mode %q; want %q, %q or %q", ErrDHTConfig, cfg.Mode, DHTModeAuto, DHTModeServer, DHTModeClient)
	}
	reprovide := cfg.ReprovideInterval
	if reprovide == 0 {
		reprovide = DefaultReprovideInterval
	}
	if reprovide < 0 || reprovide >= maxReprovideInterval {
		return nil, fmt.Errorf("%w: reprovide interval %v; want above 0 and under %v", ErrDHTConfig, reprovide, maxReprovideInterval)
	}
	d := &DHT{
		h:            h,
		log:          cfg.Logger,
		counters:     cfg.Counters,
		reprovide:    reprovide,
		profileCheck: cfg.profileCheck,
		bootstrap:    map[peer.ID]peer.AddrInfo{},
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.log = d.log.With("component", "dht")
	if d.counters == nil {
		d.counters = &Counters{}
	}
	if d.profileCheck <= 0 {
		d.profileCheck = profileCheckInterval
	}
	opts := []kaddht.Option{
		kaddht.ProtocolPrefix(DHTProtocolPrefix),
		kaddht.Mode(mode),
		kaddht.DisableValues(),
		// When the routing table empties, kad-dht redials these.
		kaddht.BootstrapPeersFunc(d.bootstrapPeers),
	}
	kad, err := kaddht.New(ctx, h, append(opts, cfg.kadOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("discovery: start DHT: %w", err)
	}
	d.kad = kad
	return d, nil
}

// Close stops the DHT. Cancel Run's context first.
func (d *DHT) Close() error {
	if err := d.kad.Close(); err != nil {
		return fmt.Errorf("discovery: close DHT: %w", err)
	}
	return nil
}

// Mode is the mode the DHT is in now: DHTModeServer while it answers
// queries, DHTModeClient otherwise. In DHTModeAuto it changes with the
// node's reachability.
func (d *DHT) Mode() string {
	if slices.Contains(d.h.Mux().Protocols(), kadProtocol) {
		return DHTModeServer
	}
	return DHTModeClient
}

func (d *DHT) bootstrapPeers() []peer.AddrInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]peer.AddrInfo, 0, len(d.bootstrap))
	for _, ai := range d.bootstrap {
		out = append(out, ai)
	}
	return out
}

// Bootstrap connects to the peers it is not yet connected to, waits
// (briefly) for those that are DHT servers to enter the routing table, and
// refreshes the routing table. Call it again whenever a source finds new
// peers: static peers, DNS-SD and mDNS finds. The peers are also kept as
// the fallback kad-dht redials when its routing table runs empty.
//
// It returns an error wrapping ErrNoDHTPeers, with the dial errors, only
// when the routing table is still empty at the end.
func (d *DHT) Bootstrap(ctx context.Context, peers []peer.AddrInfo) error {
	var dial []peer.AddrInfo
	d.mu.Lock()
	for _, ai := range peers {
		if ai.ID == d.h.ID() || ai.ID.Validate() != nil {
			continue
		}
		if old, ok := d.bootstrap[ai.ID]; ok || len(d.bootstrap) < maxBootstrapPeers {
			d.bootstrap[ai.ID] = peer.AddrInfo{ID: ai.ID, Addrs: mergeAddrs(old.Addrs, ai.Addrs)}
		}
		dial = append(dial, ai)
	}
	d.mu.Unlock()

	var (
		wg   sync.WaitGroup
		emu  sync.Mutex
		errs []error
	)
	for _, ai := range dial {
		if d.h.Network().Connectedness(ai.ID) == network.Connected {
			continue
		}
		wg.Go(func() {
			if err := d.h.Connect(ctx, ai); err != nil {
				d.log.Debug("bootstrap peer unreachable", "peer", ai.ID, "error", err)
				emu.Lock()
				errs = append(errs, fmt.Errorf("dial %s: %w", ai.ID, err))
				emu.Unlock()
			}
		})
	}
	wg.Wait()

	d.waitRoutingTable(ctx, dial)
	if d.kad.RoutingTable().Size() == 0 {
		if len(errs) == 0 {
			return ErrNoDHTPeers
		}
		return fmt.Errorf("%w: %w", ErrNoDHTPeers, errors.Join(errs...))
	}
	select {
	case err := <-d.kad.RefreshRoutingTable():
		if err != nil {
			// Some bucket refresh found no peer; common in a small mesh.
			d.log.Debug("routing table refresh incomplete", "error", err)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// waitRoutingTable waits, up to routingTableWait, until one of peers is
// in the routing table or none can still get there. kad-dht adds a
// connected peer only once identify has shown that it is a DHT server and
// it has answered a FIND_NODE, asynchronously; a refresh started before
// that would run on an empty table and do nothing. (Connect does not
// always wait for identify: kad-dht may be dialling the same peer, as a
// fallback bootstrap peer, and then Connect returns at once.)
func (d *DHT) waitRoutingTable(ctx context.Context, peers []peer.AddrInfo) {
	ctx, cancel := context.WithTimeout(ctx, routingTableWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	rt := d.kad.RoutingTable()
	for {
		pending := false
		for _, ai := range peers {
			if rt.Find(ai.ID) != "" {
				return
			}
			if d.h.Network().Connectedness(ai.ID) != network.Connected {
				continue
			}
			protos, err := d.h.Peerstore().GetProtocols(ai.ID)
			// No protocols yet: identify has not finished.
			if err == nil && (len(protos) == 0 || slices.Contains(protos, kadProtocol)) {
				pending = true
			}
		}
		if !pending {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Advertise puts a provider record for each profile now, on the DHT
// servers closest to its ProfileKey. It returns every failure, joined; a
// profile whose name protocol.CheckProfileName refuses is not advertised.
func (d *DHT) Advertise(ctx context.Context, profiles []string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, name := range normalizeProfiles(profiles) {
		if err := protocol.CheckProfileName(name); err != nil {
			errs = append(errs, fmt.Errorf("discovery: advertise %q: %w", name, err))
			continue
		}
		wg.Go(func() {
			if err := d.kad.Provide(ctx, ProfileKey(name), true); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("discovery: advertise %q: %w", name, err))
				mu.Unlock()
				return
			}
			d.log.Debug("profile advertised", "profile", name)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Run advertises profiles() as soon as the routing table holds a peer,
// again every ReprovideInterval, and whenever profiles() changes, which it
// checks every minute. A round that failed is tried again as soon as the
// routing table gains a peer (30 seconds later at most), and while the
// table is smaller than one bucket every growth starts a round (at most
// one every 2 s): in a home lab the first round often runs before any
// server is known, and the first servers known are not the closest to a
// profile's key. A profile that is dropped is no longer re-advertised; its
// records lapse within 48 hours, and nobody trusts them anyway until the
// node's signed capability assertion says so. Run returns when ctx ends.
//
// Run also keeps the peers of the routing table's two widest buckets
// connected (keep).
func (d *DHT) Run(ctx context.Context, profiles func() []string) {
	var kept sync.WaitGroup
	defer kept.Wait()
	kept.Go(func() { d.keep(ctx) })
	current := normalizeProfiles(profiles())
	next := time.NewTimer(0)
	defer next.Stop()
	check := time.NewTicker(d.profileCheck)
	defer check.Stop()
	rtTick := time.NewTicker(routingTableCheck)
	defer rtTick.Stop()
	// lastSize is the routing table's size at the last round; failed says
	// that round failed; lastAt is when it ran.
	lastSize, failed := 0, false
	var lastAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-rtTick.C:
			size := d.kad.RoutingTable().Size()
			grew := size > lastSize && (failed || lastSize < smallTable)
			if grew && len(current) > 0 && now.Sub(lastAt) >= regrowAdvertiseGap {
				d.log.Debug("routing table grew; advertising again", "peers", size, "was", lastSize)
				next.Reset(0)
			}
		case <-check.C:
			now := normalizeProfiles(profiles())
			if slices.Equal(now, current) {
				continue
			}
			current = now
			d.log.Debug("profiles changed", "profiles", current)
			next.Reset(0)
		case <-next.C:
			wait := d.reprovide
			lastSize, lastAt, failed = d.kad.RoutingTable().Size(), time.Now(), false
			if len(current) > 0 && lastSize == 0 {
				// Nothing to put records on: wait for the table to grow.
				failed = true
				next.Reset(advertiseRetry)
				continue
			}
			if err := d.advertiseRound(ctx, current); err != nil {
				if ctx.Err() != nil {
					return
				}
				d.log.Debug("advertise round failed", "error", err)
				failed = true
				wait = min(wait, advertiseRetry)
			}
			next.Reset(wait)
		}
	}
}

// keep redials the peers of the routing table's keptBuckets widest
// buckets when they are not connected: at once when one disconnects, and
// every keepInterval, until ctx ends.
//
// A lookup starts from the routing-table peers closest to its key, and
// for three keys in four they come from those two buckets; a connection
// that exists saves the lookup a round trip or more (the handshake and
// identify) before its first answer. kad-dht protects these peers from
// this node's connection manager, but a connection closes when either end
// trims it, and the other end rarely has this node in its own widest
// buckets: without keep, a node with a connection manager was connected
// to about a third of a lookup's first peers (docs/scale.md). Each node
// keeps about 2 × 20 peers and is kept by about as many, well under the
// connection manager's low water mark.
func (d *DHT) keep(ctx context.Context) {
	wake := make(chan struct{}, 1)
	notifee := &network.NotifyBundle{DisconnectedF: func(_ network.Network, c network.Conn) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}}
	d.h.Network().Notify(notifee)
	defer d.h.Network().StopNotify(notifee)
	tick := time.NewTicker(keepInterval)
	defer tick.Stop()
	// A dial that failed (the other end still closing, a dial backoff of
	// the swarm's) is tried again after keepRetry, doubling up to
	// keepInterval, not only at the next tick.
	retry := time.NewTimer(keepInterval)
	defer retry.Stop()
	backoff := keepRetry
	// The first pass runs at once: a peer that disconnected before the
	// notifee above was in place sent no wake.
	for {
		if d.redialKept(ctx) {
			backoff = keepRetry
			retry.Reset(keepInterval)
		} else {
			retry.Reset(backoff)
			backoff = min(2*backoff, keepInterval)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-wake:
		case <-retry.C:
		}
	}
}

// keptPeers are the routing-table peers keep keeps connected.
func (d *DHT) keptPeers() []peer.ID {
	self := kb.ConvertPeerID(d.h.ID())
	var out []peer.ID
	for _, p := range d.kad.RoutingTable().ListPeers() {
		if kb.CommonPrefixLen(self, kb.ConvertPeerID(p)) < keptBuckets {
			out = append(out, p)
		}
	}
	return out
}

// redialKept dials the kept peers that are not connected, keepDials at a
// time, and returns once every dial has ended: true when every dial
// succeeded. A peer that cannot be reached stays in the routing table
// until kad-dht drops it; the swarm's dial backoff spaces out the tries.
func (d *DHT) redialKept(ctx context.Context) bool {
	var failed atomic.Bool
	var wg sync.WaitGroup
	sem := make(chan struct{}, keepDials)
	for _, p := range d.keptPeers() {
		if d.h.Network().Connectedness(p) == network.Connected {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return false
		}
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, keepDialTimeout)
			defer cancel()
			if err := d.h.Connect(ctx, peer.AddrInfo{ID: p}); err != nil {
				failed.Store(true)
				d.log.Debug("kept peer unreachable", "peer", p, "error", err)
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}

func (d *DHT) advertiseRound(ctx context.Context, profiles []string) error {
	if len(profiles) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, advertiseTimeout)
	defer cancel()
	return d.Advertise(ctx, profiles)
}

// FindProviders looks up providers of profile until it has limit of them
// (20 when limit is 0 or less), the lookup ends, or ctx ends. Providers come
// back as Hints from SourceDHT naming the profile; the local node is never
// one of them. Provider records with a peer ID that cannot be a kith node
// are dropped and counted under "dht/malformed", answers that do not
// decode under "dht/malformed_answer". The error is non-nil only for an
// invalid profile name, or when ctx ended before any provider was found.
//
// Beside kad-dht's lookup, which starts from the routing table, it asks
// the nearProbes connected DHT servers closest to the key directly, in
// one round trip over connections that exist. A record lives on the ~20
// servers closest to its key, so any holder this node is connected to is
// closer to the key than every connected server that is not one: if the
// node is connected to a holder at all, the closest connected server is
// one. With the widest buckets kept connected (keep) that was so in 27 of
// 40 lookups at N = 1,000, and in every lookup of a mesh of 20 servers or
// fewer (docs/scale.md).
func (d *DHT) FindProviders(ctx context.Context, profile string, limit int) ([]Hint, error) {
	if err := protocol.CheckProfileName(profile); err != nil {
		return nil, fmt.Errorf("discovery: find providers: %w", err)
	}
	if limit <= 0 {
		limit = defaultFindLimit
	}
	lookup, cancel := context.WithCancel(ctx)
	defer cancel()
	found := d.findAsync(lookup, ProfileKey(profile))
	var hints []Hint
	// The lookup and the direct questions may bring the same record: a
	// bad one is counted once.
	dropped := map[peer.ID]bool{}
	for ai := range found {
		if ai.ID == d.h.ID() || dropped[ai.ID] {
			continue
		}
		h, err := providerHint(ai, profile)
		if err != nil {
			if len(dropped) < maxDroppedSeen {
				dropped[ai.ID] = true
			}
			d.counters.Drop(d.log, SourceDHT, "malformed", "profile", profile, "error", err)
			continue
		}
		// kad-dht reports a provider again when a later record has
		// addresses and the first had none.
		if i := slices.IndexFunc(hints, func(o Hint) bool { return o.ID == h.ID }); i >= 0 {
			hints[i].Addrs = mergeAddrs(hints[i].Addrs, h.Addrs)
			continue
		}
		hints = append(hints, h)
		if len(hints) >= limit {
			break
		}
	}
	cancel()
	// Drain, so the lookup goroutine has ended when we return.
	for range found {
	}
	if len(hints) == 0 && ctx.Err() != nil {
		return nil, fmt.Errorf("discovery: find providers of %q: %w", profile, ctx.Err())
	}
	return hints, nil
}

// findAsync streams the providers of c from kad-dht's lookup and from
// the connected servers closest to its key (FindProviders), until both
// are done or ctx ends. The channel closes once every goroutine has ended.
func (d *DHT) findAsync(ctx context.Context, c cid.Cid) <-chan peer.AddrInfo {
	key := c.Hash()
	out := make(chan peer.AddrInfo)
	var wg sync.WaitGroup
	// Count 0 lets the lookup run on past records FindProviders drops; it
	// is cancelled as soon as enough good ones are in.
	lookup := d.kad.FindProvidersAsync(ctx, c, 0)
	wg.Go(func() {
		for ai := range lookup {
			select {
			case out <- ai:
			case <-ctx.Done():
				// Drain: kad-dht closes the channel once its
				// lookup has seen ctx end.
			}
		}
	})
	for _, p := range d.closestConnected(key, nearProbes) {
		wg.Go(func() {
			provs, err := d.askProviders(ctx, p, key)
			if err != nil {
				if ctx.Err() == nil && errors.Is(err, errMalformedAnswer) {
					d.counters.Drop(d.log, SourceDHT, "malformed_answer", "peer", p, "error", err)
				} else {
					d.log.Debug("direct provider query failed", "peer", p, "error", err)
				}
				return
			}
			for _, ai := range provs {
				select {
				case out <- ai:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// closestConnected returns up to n of the peers this node is connected to
// that speak the DHT's protocol (as identify told), closest to key first.
func (d *DHT) closestConnected(key multihash.Multihash, n int) []peer.ID {
	var servers []peer.ID
	for _, p := range d.h.Network().Peers() {
		if proto, err := d.h.Peerstore().FirstSupportedProtocol(p, kadProtocol); err == nil && proto != "" {
			servers = append(servers, p)
		}
	}
	servers = kb.SortClosestPeers(servers, kb.ConvertKey(string(key)))
	return servers[:min(n, len(servers))]
}

// errMalformedAnswer: a DHT server's answer did not decode, or was not
// the answer to the question asked.
var errMalformedAnswer = errors.New("malformed answer")

// askProviders asks p, a DHT server this node is connected to, for the
// provider records of key it stores: one GET_PROVIDERS on a new stream,
// the message kad-dht's lookup sends each peer it queries. It never
// dials. The question and its answer are published as query events
// (routing.RegisterForQueryEvents), as kad-dht's own are.
func (d *DHT) askProviders(ctx context.Context, p peer.ID, key multihash.Multihash) ([]peer.AddrInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := proto.Marshal(dhtpb.NewMessage(dhtpb.Message_GET_PROVIDERS, key, 0))
	if err != nil {
		return nil, fmt.Errorf("encode question: %w", err)
	}
	routing.PublishQueryEvent(ctx, &routing.QueryEvent{Type: routing.SendingQuery, ID: p})
	s, err := d.h.NewStream(network.WithNoDial(ctx, "connected servers only"), p, kadProtocol)
	if err != nil {
		return nil, err
	}
	// The stream lives no longer than ctx: a server that never answers
	// costs probeTimeout, not a stuck goroutine.
	stop := context.AfterFunc(ctx, func() { _ = s.Reset() })
	defer stop()
	if err := msgio.NewVarintWriter(s).WriteMsg(req); err != nil {
		_ = s.Reset()
		return nil, fmt.Errorf("send question: %w", err)
	}
	answer, err := msgio.NewVarintReaderSize(s, maxKadMessage).ReadMsg()
	if err != nil {
		_ = s.Reset()
		if errors.Is(err, msgio.ErrMsgTooLarge) {
			return nil, fmt.Errorf("%w: over %d bytes", errMalformedAnswer, maxKadMessage)
		}
		return nil, fmt.Errorf("read answer: %w", err)
	}
	_ = s.Close()
	provs, closer, err := decodeProvidersAnswer(answer, key)
	if err != nil {
		return nil, err
	}
	routing.PublishQueryEvent(ctx, &routing.QueryEvent{Type: routing.PeerResponse, ID: p, Responses: closer})
	return provs, nil
}

// decodeProvidersAnswer decodes a DHT server's answer to GET_PROVIDERS
// for key: the provider records it holds and the closer peers it names.
// The records are as untrusted as kad-dht's: FindProviders checks each
// (providerHint).
func decodeProvidersAnswer(b []byte, key multihash.Multihash) ([]peer.AddrInfo, []*peer.AddrInfo, error) {
	var m dhtpb.Message
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errMalformedAnswer, err)
	}
	if m.GetType() != dhtpb.Message_GET_PROVIDERS {
		return nil, nil, fmt.Errorf("%w: a %v message", errMalformedAnswer, m.GetType())
	}
	if !bytes.Equal(m.GetKey(), key) {
		return nil, nil, fmt.Errorf("%w: about another key", errMalformedAnswer)
	}
	provs := make([]peer.AddrInfo, 0, len(m.GetProviderPeers()))
	for _, pp := range m.GetProviderPeers() {
		provs = append(provs, dhtpb.PBPeerToPeerInfo(pp))
	}
	return provs, dhtpb.PBPeersToPeerInfos(m.GetCloserPeers()), nil
}

// providerHint turns a provider record into a Hint. A record is only as
// good as the DHT server that returned it: kad-dht does not check the peer
// IDs in answers, so this does. Kith peer IDs embed Ed25519 keys; no other
// ID can sign a capability assertion. A record with no addresses is fine:
// the peerstore may know some, and a dial can look the peer up.
func providerHint(ai peer.AddrInfo, profile string) (Hint, error) {
	if err := ai.ID.Validate(); err != nil {
		return Hint{}, fmt.Errorf("provider peer ID: %w", err)
	}
	if _, err := crypto.Ed25519FromPeerID(ai.ID); err != nil {
		return Hint{}, fmt.Errorf("provider %s: %w", ai.ID, err)
	}
	var addrs []ma.Multiaddr
	for _, a := range ai.Addrs {
		if len(a) == 0 {
			continue
		}
		if len(addrs) == maxHintAddrs {
			break
		}
		addrs = append(addrs, a)
	}
	return Hint{ID: ai.ID, Addrs: addrs, Source: SourceDHT, Profiles: []string{profile}}, nil
}

// normalizeProfiles sorts and deduplicates profile names, so that two
// lists can be compared.
func normalizeProfiles(profiles []string) []string {
	out := slices.Clone(profiles)
	slices.Sort(out)
	return slices.Compact(out)
}

// mergeAddrs returns a followed by the addresses of b not in a.
func mergeAddrs(a, b []ma.Multiaddr) []ma.Multiaddr {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.ContainsFunc(out, x.Equal) {
			out = append(out, x)
		}
	}
	return out
}

// FindPeer looks up p's addresses: those of the peerstore while p is
// connected, else those the DHT servers closest to p's ID know. It fails
// when none of them knows p.
func (d *DHT) FindPeer(ctx context.Context, p peer.ID) (peer.AddrInfo, error) {
	ai, err := d.kad.FindPeer(ctx, p)
	if err != nil {
		return peer.AddrInfo{}, fmt.Errorf("discovery: find peer %s: %w", p, err)
	}
	if len(ai.Addrs) > maxHintAddrs {
		ai.Addrs = ai.Addrs[:maxHintAddrs]
	}
	return ai, nil
}

// InRoutingTable reports whether p is in the DHT's routing table: a DHT
// server this node has talked to.
func (d *DHT) InRoutingTable(p peer.ID) bool { return d.kad.RoutingTable().Find(p) != "" }
