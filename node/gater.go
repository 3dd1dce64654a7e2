package node

import (
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/store"
)

// gater is the libp2p connection gater: denied peers are refused on dial
// and on accept; in allowlist mode, so is every peer not allowed. It keeps
// the allow/deny list in memory (the store is the durable copy), so a
// handshake never waits on the disk, and changes apply at once.
type gater struct {
	allowlist atomic.Bool // policy.mode; a reload may change it
	// refused, when set, hears every inbound connection refused because
	// of the lists (set before the host starts; see refusalLog).
	refused func(peer.ID, network.ConnMultiaddrs)

	mu     sync.RWMutex
	access map[peer.ID]store.Access
}

func newGater(mode config.PolicyMode, peers []store.Peer) *gater {
	g := &gater{access: make(map[peer.ID]store.Access)}
	g.allowlist.Store(mode == config.PolicyAllowlist)
	for _, p := range peers {
		g.access[p.ID] = p.Access
	}
	return g
}

func (g *gater) set(p peer.ID, a store.Access) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if a == store.AccessNone {
		delete(g.access, p)
	} else {
		g.access[p] = a
	}
}

// admits reports whether p may hold a connection to this node.
func (g *gater) admits(p peer.ID) bool {
	g.mu.RLock()
	a := g.access[p]
	g.mu.RUnlock()
	if a == store.AccessDeny {
		return false
	}
	return !g.allowlist.Load() || a == store.AccessAllow
}

func (g *gater) denied(p peer.ID) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.access[p] == store.AccessDeny
}

// InterceptPeerDial refuses to dial a denied peer.
func (g *gater) InterceptPeerDial(p peer.ID) bool { return !g.denied(p) }

// InterceptAddrDial allows every address of a peer that may be dialled.
func (g *gater) InterceptAddrDial(peer.ID, ma.Multiaddr) bool { return true }

// InterceptAccept cannot know the peer yet; InterceptSecured decides.
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured runs once the remote peer is authenticated, in both
// directions: the place for the allow and deny lists.
func (g *gater) InterceptSecured(dir network.Direction, p peer.ID, addrs network.ConnMultiaddrs) bool {
	if g.admits(p) {
		return true
	}
	if dir == network.DirInbound && g.refused != nil {
		g.refused(p, addrs)
	}
	return false
}

// InterceptUpgraded allows what InterceptSecured allowed.
func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
