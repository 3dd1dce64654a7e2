package node

import (
	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"

	"github.com/kithmesh/kith/node/config"
)

// resourceManager builds libp2p's resource manager with the per-peer limits
// of [limits] on top of libp2p's defaults scaled to this machine: one peer
// cannot hold more connections, streams or memory than configured, however
// it behaves.
//
// Its Prometheus metrics are off: they go to the default registry, which
// the node never serves (its /metrics has a registry of its own), and
// keeping them cost about 5% of the CPU of a delegation (a trace event per
// stream, scope and memory reservation). The same goes for libp2p's other
// metrics (libp2p.DisableMetrics in newHost).
func resourceManager(l config.Limits) (network.ResourceManager, error) {
	peer := rcmgr.ResourceLimits{
		Conns:   rcmgr.LimitVal(l.MaxConnsPerPeer),
		Streams: rcmgr.LimitVal(l.MaxStreamsPerPeer),
		// Inbound streams are what a hostile peer controls.
		StreamsInbound: rcmgr.LimitVal(l.MaxStreamsPerPeer),
		Memory:         rcmgr.LimitVal64(int64(l.MaxMemoryPerPeerMiB) << 20),
	}
	limits := rcmgr.PartialLimitConfig{
		PeerDefault: peer,
		// A peer's streams of any one protocol (ours included) are bounded
		// by the same figure, not libp2p's smaller per-protocol default.
		ProtocolPeerDefault: rcmgr.ResourceLimits{Streams: peer.Streams, StreamsInbound: peer.Streams},
	}.Build(rcmgr.DefaultLimits.AutoScale())
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits), rcmgr.WithMetricsDisabled())
}
