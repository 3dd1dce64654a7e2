package crypto

import (
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// MemoryReplayCache is an in-memory ReplayCache for tests and tools. A node
// uses the store's durable cache so that a restart does not reopen the
// replay window.
type MemoryReplayCache struct {
	mu   sync.Mutex
	seen map[replayKey]time.Time
	now  func() time.Time
	// Max is the most live entries it holds (DefaultMaxReplayEntries if
	// 0); set it before first use.
	Max int
}

type replayKey struct {
	sender peer.ID
	id     MessageID
}

// NewMemoryReplayCache returns an empty cache; now is time.Now when nil.
func NewMemoryReplayCache(now func() time.Time) *MemoryReplayCache {
	if now == nil {
		now = time.Now
	}
	return &MemoryReplayCache{seen: make(map[replayKey]time.Time), now: now}
}

// CheckAndRemember implements ReplayCache.
func (c *MemoryReplayCache) CheckAndRemember(sender peer.ID, id MessageID, expires time.Time) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := replayKey{sender, id}
	now := c.now()
	if exp, ok := c.seen[k]; ok && now.Before(exp) {
		return true, nil
	}
	limit := c.Max
	if limit <= 0 {
		limit = DefaultMaxReplayEntries
	}
	if len(c.seen) >= limit {
		for k, exp := range c.seen {
			if !now.Before(exp) {
				delete(c.seen, k)
			}
		}
		if len(c.seen) >= limit {
			return false, fmt.Errorf("%w: %d live entries", ErrReplayCacheFull, len(c.seen))
		}
	}
	c.seen[k] = expires
	return false, nil
}
