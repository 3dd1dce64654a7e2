package discovery

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	p2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/multiformats/go-multihash"
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

// InRoutingTable reports whether p is in the DHT's routing table: a DHT
// server this node has talked to.
func (d *DHT) InRoutingTable(p peer.ID) bool { return d.kad.RoutingTable().Find(p) != "" }
