package node

import (
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
)

// clearDialBackoff forgets the swarm's dial backoff for p. go-libp2p backs
// off an address for 5 s and more after a failed dial, so a node that
// started before its static peer would otherwise not reach it until that
// backoff ended, however soon the peer came up.
func clearDialBackoff(h host.Host, p peer.ID) {
	if sw, ok := h.Network().(*swarm.Swarm); ok {
		sw.Backoff().Clear(p)
	}
}
