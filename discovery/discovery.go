package discovery

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"

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

// Counters counts input dropped by the sources, by source and reason
// ("mdns/bad_txt", "gossip/forged", ...). The zero value is ready to use
// and safe for concurrent use.
type Counters struct {
	mu sync.Mutex
	m  map[string]uint64
}

// Drop counts one piece of input dropped by source for reason, and logs it
// at debug level with args.
func (c *Counters) Drop(log *slog.Logger, source Source, reason string, args ...any) {
	key := string(source) + "/" + reason
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]uint64{}
	}
	c.m[key]++
	c.mu.Unlock()
	if log != nil {
		log.Debug("discovery input dropped", append([]any{"source", source, "reason", reason}, args...)...)
	}
}

// Get returns one counter, by its "source/reason" key.
func (c *Counters) Get(key string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

// Snapshot returns a copy of every counter.
func (c *Counters) Snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// Keys returns the counter keys in order.
func (c *Counters) Keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.m))
}
