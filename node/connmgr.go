package node

import (
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/peer"
	basicconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"

	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Connection manager tags. Protected peers are never trimmed; tagged ones
// go after everything worth less (kad-dht tags routing-table peers 5,
// gossipsub tags mesh peers 20).
const (
	protectStatic     = "kith-static"   // static peers and trusted peers
	protectRelay      = "kith-relay"    // [nat] relays
	tagDelegate       = "kith-delegate" // peers this node opened a delegation or query stream to
	tagDelegateWeight = 100
	// connGrace is how long a new connection is safe from trimming: long
	// enough for identify, a DHT query and a capability query.
	connGrace = time.Minute
)

// connManager is the policy for a mesh of home labs: past conns_high
// connections, close the least valuable down to conns_low, so that the
// DHT's traffic (which connects to every server a lookup passes) does not
// leave each node holding a connection to much of the mesh. Static peers,
// peers trusted by name, and relays are protected; peers this node
// delegates to are tagged above anything the DHT or gossipsub gives
// (dialer.OpenStream), so DHT-only peers go first.
func connManager(c config.Config, known []store.Peer) (*basicconnmgr.BasicConnMgr, error) {
	cm, err := basicconnmgr.NewConnManager(c.Discovery.ConnsLow, c.Discovery.ConnsHigh, basicconnmgr.WithGracePeriod(connGrace))
	if err != nil {
		return nil, fmt.Errorf("node: connection manager: %w", err)
	}
	for _, p := range known {
		if p.Access != store.AccessDeny && (slices.Contains(p.Sources, "static") || p.Trust >= protocol.Trusted) {
			cm.Protect(p.ID, protectStatic)
		}
	}
	for _, ai := range staticRelays(c.NAT.Relays) {
		cm.Protect(ai.ID, protectRelay)
	}
	return cm, nil
}

// markDelegate tags p as a peer this node works with.
func markDelegate(cm connmgr.ConnManager, p peer.ID) {
	cm.TagPeer(p, tagDelegate, tagDelegateWeight)
}
