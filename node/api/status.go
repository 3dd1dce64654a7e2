package api

import (
	"context"
	"net/http"
	"time"
)

// Paths of a connection to a peer, in ConnectedPeer.Path and "kith status".
const (
	// PathDirect: at least one connection goes straight to the peer.
	PathDirect = "direct"
	// PathRelayed: every connection goes through a circuit relay.
	PathRelayed = "relayed"
)

// Status is GET /status: how reachable the node is from the internet, at
// which addresses, and how it is connected to each peer.
type Status struct {
	PeerID string `json:"peer_id"`
	// Version is the daemon's version (kith version).
	Version string `json:"version"`

	// Reachability is AutoNAT's verdict on the node: "public", "private" or
	// "unknown". A node with relay = true is public by declaration.
	Reachability string `json:"reachability"`

	// NATTCP and NATUDP describe the NAT in front of the node, per
	// transport, as the addresses peers observe suggest:
	// "endpoint-independent" (hole punching can work),
	// "endpoint-dependent" (it cannot; relayed connections stay relayed) or
	// "unknown".
	NATTCP string `json:"nat_tcp"`
	NATUDP string `json:"nat_udp"`
	// NATNote says, while a NAT type is unknown, what the observed
	// addresses show so far and why that is not enough for a verdict.
	NATNote string `json:"nat_note,omitempty"`

	// RelayService says whether the node relays for other peers ([nat]
	// relay), and RelayPolicy for whom: "open" (any peer not denied) or
	// "allowlist" (allowed peers only).
	RelayService bool   `json:"relay_service"`
	RelayPolicy  string `json:"relay_policy,omitempty"`

	// Relays are the configured static relays ([nat] relays).
	Relays []string `json:"relays"`

	// ListenAddrs are the addresses the host is bound to.
	ListenAddrs []string `json:"listen_addrs"`

	// Addrs are the addresses the node gives peers, relay addresses
	// included, each a full multiaddr ending in /p2p/<peer id>.
	Addrs []string `json:"addrs"`

	// RelayAddrs are the node's addresses through the relays where it holds
	// a reservation, full multiaddrs (…/p2p-circuit/p2p/<peer id>): give
	// one to a peer that cannot reach this node directly.
	RelayAddrs []string `json:"relay_addrs"`

	// ObservedAddrs are the node's addresses as connected peers see them
	// (identify): behind NAT, the router's public address and the port it
	// mapped.
	ObservedAddrs []ObservedAddr `json:"observed_addrs"`

	// ReachableAddrs and UnreachableAddrs are the public addresses AutoNAT
	// v2 has confirmed reachable or unreachable by asking peers to dial
	// back.
	ReachableAddrs   []string `json:"reachable_addrs"`
	UnreachableAddrs []string `json:"unreachable_addrs"`

	// Peers are the connected peers, sorted by ID.
	Peers []ConnectedPeer `json:"peers"`
}

// ObservedAddr is one address of this node as peers observe it.
type ObservedAddr struct {
	Addr      string `json:"addr"`
	Observers int    `json:"observers"` // connected peers that report it
}

// ConnectedPeer is one connected peer of GET /status.
type ConnectedPeer struct {
	ID string `json:"id"`
	// Path is PathDirect or PathRelayed.
	Path string `json:"path"`
	// RTTMillis is the round-trip time measured by a ping when the status
	// was asked for, over the connection new streams use (the direct one
	// when there is one); else libp2p's moving average; 0 when unknown.
	RTTMillis float64 `json:"rtt_ms,omitempty"`
	// Agent is the peer's user agent, e.g. "kith/0.1.0".
	Agent string `json:"agent,omitempty"`
	Conns []Conn `json:"conns"`
	// HolePunch is the last attempt to replace a relayed connection to the
	// peer by a direct one, if any.
	HolePunch *HolePunch `json:"hole_punch,omitempty"`
}

// Conn is one connection to a peer.
type Conn struct {
	Addr      string    `json:"addr"`      // the peer's end
	Direction string    `json:"direction"` // "inbound" or "outbound"
	Relayed   bool      `json:"relayed"`   // through a circuit relay
	Limited   bool      `json:"limited"`   // the relay caps its duration and data
	Opened    time.Time `json:"opened,omitzero"`
}

// HolePunch is the outcome of one attempt at a direct connection to a peer
// first reached through a relay.
type HolePunch struct {
	At            time.Time `json:"at"`
	Success       bool      `json:"success"`
	ElapsedMillis float64   `json:"elapsed_ms"`
	Error         string    `json:"error,omitempty"`
}

// Status returns the daemon's reachability, addresses and connections.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodGet, "/status", nil, &s)
}
