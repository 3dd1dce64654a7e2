package delegation

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// peerLimiter holds one token bucket per peer for one kind of request.
// Buckets of peers that have gone quiet are dropped once the map grows, so
// a stream of new peer IDs cannot grow it without bound: a dropped bucket
// was full anyway (it had been idle at least a full refill).
type peerLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[peer.ID]*rate.Limiter
}

// maxBuckets is the map size above which idle buckets are swept.
const maxBuckets = 4096

func newPeerLimiter(perSecond float64, burst int) *peerLimiter {
	if perSecond <= 0 {
		return nil // unlimited
	}
	return &peerLimiter{limit: rate.Limit(perSecond), burst: max(burst, 1), buckets: make(map[peer.ID]*rate.Limiter)}
}

// allow takes a token from p's bucket; a nil limiter allows everything.
func (l *peerLimiter) allow(p peer.ID, now time.Time) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[p]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.sweep(now)
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[p] = b
	}
	return b.AllowN(now, 1)
}

// sweep drops the buckets that are full again.
func (l *peerLimiter) sweep(now time.Time) {
	for p, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, p)
		}
	}
}

// streamLimiter bounds the streams one peer may open: twice what its offer
// and query rates allow together (status queries, cancels and retries use
// streams too), so that well-behaved peers never meet it and a flood is cut
// before each stream costs an HPKE decapsulation and a signature check.
func streamLimiter(cfg Config) *peerLimiter {
	if cfg.OffersPerSecond <= 0 || cfg.QueriesPerSecond <= 0 {
		return nil
	}
	return newPeerLimiter(2*(cfg.OffersPerSecond+cfg.QueriesPerSecond), 2*(max(cfg.OfferBurst, 1)+max(cfg.QueryBurst, 1)))
}
