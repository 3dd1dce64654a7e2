package discovery

// Lookups on the DHT: the providers of a profile (kad-dht's lookup and
// direct questions to the closest connected servers, every record checked
// before it becomes a Hint), and a peer's addresses.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/ipfs/go-cid"
	dhtpb "github.com/libp2p/go-libp2p-kad-dht/pb"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
	"github.com/libp2p/go-msgio"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/multiformats/go-multihash"
	"google.golang.org/protobuf/proto"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

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
