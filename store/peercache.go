package store

import (
	"slices"
	"strings"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// peerCache keeps the peers GetPeer read, so that the engine's trust
// lookup on every offer and every result does not read and decode a
// record. Every write of a peer record goes through Store.update with the
// peer's key among its lock keys; update forgets those peers once the
// write has committed (or failed), so a cached peer is never older than
// the last committed write.
//
// A reader may race a write: it reads the record before the write
// commits and would cache what the write replaced. gen prevents that: a
// reader caches what it read only if no forget happened since it started,
// and every forget comes after its write committed.
type peerCache struct {
	mu  sync.Mutex
	gen uint64
	m   map[peer.ID]cachedPeer
}

type cachedPeer struct {
	p     Peer
	found bool // false: GetPeer answered ErrNotFound
}

// maxCachedPeers bounds the cache; past it, it starts again empty.
const maxCachedPeers = 4096

func (c *peerCache) get(id peer.ID) (p Peer, found, ok bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok {
		return Peer{}, false, false, c.gen
	}
	return e.p.clone(), e.found, true, c.gen
}

func (c *peerCache) put(id peer.ID, p Peer, found bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return // a write committed while this was read
	}
	if c.m == nil || len(c.m) >= maxCachedPeers {
		c.m = make(map[peer.ID]cachedPeer)
	}
	c.m[id] = cachedPeer{p: p.clone(), found: found}
}

// forget drops the peers among lockKeys after a write that held them.
func (c *peerCache) forget(lockKeys []string) {
	var ids []peer.ID
	for _, k := range lockKeys {
		if id, ok := strings.CutPrefix(k, prefixPeer); ok {
			ids = append(ids, peer.ID(id))
		}
	}
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, id := range ids {
		delete(c.m, id)
	}
}

// clone copies p's slices, so that a caller may change what it got.
func (p Peer) clone() Peer {
	p.Addrs = slices.Clone(p.Addrs)
	p.Sources = slices.Clone(p.Sources)
	return p
}
