package discovery

import (
	"context"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// ServiceName is the DNS-SD service type kith announces over mDNS and
// publishes under DNS-SD domains.
const ServiceName = "_kith-a2a._tcp"

// Source names where a hint came from.
type Source string

// The sources.
const (
	SourceStatic Source = "static"
	SourceMDNS   Source = "mdns"
	SourceDNSSD  Source = "dnssd"
	SourceDHT    Source = "dht"
	SourceGossip Source = "gossip"
)

// Hint says that a peer may be reached at Addrs and may offer Profiles.
// Nothing in it is verified.
type Hint struct {
	ID       peer.ID
	Addrs    []ma.Multiaddr
	Source   Source
	Profiles []string // profile names the source mentioned; a hint only
}

// AddrInfo returns the hint's peer and addresses.
func (h Hint) AddrInfo() peer.AddrInfo { return peer.AddrInfo{ID: h.ID, Addrs: h.Addrs} }

// Sink receives hints. It must not block for long: sources call it from
// their own goroutines.
type Sink func(context.Context, Hint)
