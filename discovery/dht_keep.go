package discovery

// Kept connections: the peers of the routing table's widest buckets,
// redialled whenever they are not connected (keep, started by Run).

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

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
