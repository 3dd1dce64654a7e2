package crypto

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// peerKeys caches the keys derived from a peer ID. A node talks to the same
// few peers over and over; deriving the Ed25519 key (protobuf decode) and
// its Montgomery form (a field inversion and a square root) on every stream
// is measurable in the stream setup cost. Bounded: when full, the cache is
// dropped and refilled, which keeps it simple and its memory fixed.
type peerKeys struct {
	mu sync.Mutex
	m  map[peer.ID]derivedKeys
}

type derivedKeys struct {
	ed ed25519.PublicKey
	x  *ecdh.PublicKey
	v  verifier // checks ed's signatures
}

const peerKeyCacheSize = 4096

var keyCache = peerKeys{m: make(map[peer.ID]derivedKeys)}

func (c *peerKeys) get(id peer.ID) (derivedKeys, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.m[id]
	return k, ok
}

func (c *peerKeys) put(id peer.ID, k derivedKeys) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= peerKeyCacheSize {
		c.m = make(map[peer.ID]derivedKeys)
	}
	c.m[id] = k
}

// cachedKeys returns both keys derived from id, from the cache when it can.
func cachedKeys(id peer.ID) (derivedKeys, error) {
	if k, ok := keyCache.get(id); ok {
		return k, nil
	}
	ed, err := Ed25519FromPeerID(id)
	if err != nil {
		return derivedKeys{}, err
	}
	x, err := montgomery(ed)
	if err != nil {
		return derivedKeys{}, err
	}
	k := derivedKeys{ed: ed, x: x, v: newVerifier(ed)}
	keyCache.put(id, k)
	return k, nil
}
