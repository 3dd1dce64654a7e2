package delegation

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
)

// Stream reuse (protocol 1.4, protocol.StreamReuse). A new stream costs a
// round of the muxer's open and acknowledgement, libp2p's protocol
// negotiation, both sides' close and, with an envelope session, the
// stream's keys: on loopback about as much as the rest of a bare echo. So
// once a delegation's result has come in on a stream, a requester keeps
// the stream, sealed as it is, and sends its next offer to the same
// provider on it; the provider, which reads the stream until the requester
// closes it, serves that offer as it would a new stream's first message.
// Only a provider that lists 1.4 gets one: an older one reads nothing after
// a result but a close.

// idleStreams are the streams whose delegation is over, kept per provider
// for the next offer. A stream waits at most idleStreamTTL (at most half
// the I/O timeout, inside the provider's own wait), and a requester keeps
// at most maxIdleStreams per provider. A stream goes back as soon as its
// result is in, before the delegation is stored and its caller told, so
// at a steady load the pool holds about as many streams as delegations in
// flight to that provider: a cap below that closes streams that are
// needed again a moment later (at 8, 64 delegations in flight opened a
// new stream for 6 in 10). 64 covers the providers' remote slots in
// common configurations (4 by default); idle ones go within seconds.
type idleStreams struct {
	mu     sync.Mutex
	byPeer map[peer.ID][]*idleStream
	closed bool
	ttl    time.Duration
}

const (
	maxIdleStreams = 64
	idleStreamTTL  = 10 * time.Second
)

// A stream carries delegations for at most maxKeptAge after it was opened
// and at most maxKeptUses of them, then it is closed as before 1.4: its
// keys serve a bounded time and number of frames, of the order of one long
// delegation's.
const (
	maxKeptAge  = 5 * time.Minute
	maxKeptUses = 1024
)

type idleStream struct {
	s     Stream
	c     *protocol.Conn
	born  time.Time // when the stream was opened
	uses  int       // delegations it carried
	timer *time.Timer
}

func newIdleStreams(ioTimeout time.Duration) *idleStreams {
	ttl := idleStreamTTL
	if ioTimeout > 0 {
		ttl = min(ttl, ioTimeout/2)
	}
	return &idleStreams{byPeer: map[peer.ID][]*idleStream{}, ttl: ttl}
}

// take returns the most recently used idle stream to p, or nil.
func (p *idleStreams) take(to peer.ID) *idleStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.byPeer[to]
	for len(list) > 0 {
		is := list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
		if is.timer.Stop() {
			p.set(to, list)
			return is
		}
		// Its timer fired and is closing it.
	}
	p.set(to, list)
	return nil
}

// put keeps is (its stream, sealed conn, age and uses) for the next offer
// to p, or closes it when it has served long enough, when it runs over a
// limited connection (a relay's, which caps time and bytes and which a
// direct connection replaces once hole punching succeeds: new streams take
// the direct one), when p has enough waiting or when the pool is closed.
func (p *idleStreams) put(to peer.ID, is *idleStream, now time.Time) {
	if !p.keep(to, is, now) {
		_ = is.s.Close() // outside the lock: a close may wait on the muxer
	}
}

// keep adds is to p's idle streams, unless put says why not.
func (p *idleStreams) keep(to peer.ID, is *idleStream, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.byPeer[to]) >= maxIdleStreams || !reusable(is, now) {
		return false
	}
	is.timer = time.AfterFunc(p.ttl, func() { p.expire(to, is) })
	p.byPeer[to] = append(p.byPeer[to], is)
	return true
}

// reusable reports whether is may carry another delegation: it has not
// served long enough, and it does not run over a limited connection.
func reusable(is *idleStream, now time.Time) bool {
	return !limited(is.s) && is.uses < maxKeptUses && now.Sub(is.born) < maxKeptAge
}

// expire closes is after its time in the pool, unless taken meanwhile.
func (p *idleStreams) expire(to peer.ID, is *idleStream) {
	p.mu.Lock()
	list := p.byPeer[to]
	for i, x := range list {
		if x == is {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	p.set(to, list)
	p.mu.Unlock()
	_ = is.s.Close()
}

// set stores list as to's idle streams; p.mu is held.
func (p *idleStreams) set(to peer.ID, list []*idleStream) {
	if len(list) == 0 {
		delete(p.byPeer, to)
		return
	}
	p.byPeer[to] = list
}

// drop closes the idle streams to a provider: a new stream to it just
// failed, and kept ones count against the streams it lets a peer hold.
func (p *idleStreams) drop(to peer.ID) {
	p.mu.Lock()
	list := p.byPeer[to]
	delete(p.byPeer, to)
	p.mu.Unlock()
	closeKept(list)
}

// closeIdle closes every idle stream; later ones are kept again.
func (p *idleStreams) closeIdle() {
	p.mu.Lock()
	all := p.byPeer
	p.byPeer = map[peer.ID][]*idleStream{}
	p.mu.Unlock()
	for _, list := range all {
		closeKept(list)
	}
}

// closeKept closes streams taken out of the pool; one whose timer has
// fired is closed by its expiry.
func closeKept(list []*idleStream) {
	for _, is := range list {
		if is.timer.Stop() {
			_ = is.s.Close()
		}
	}
}

// close closes every idle stream, and any put from now on.
func (p *idleStreams) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.closeIdle()
}

// count is how many idle streams wait for p (for tests).
func (p *idleStreams) count(to peer.ID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byPeer[to])
}

// limited reports whether s is a libp2p stream over a limited (relayed)
// connection.
func limited(s Stream) bool {
	c, ok := s.(interface{ Conn() network.Conn })
	return ok && c.Conn() != nil && c.Conn().Stat().Limited
}

// CloseIdleStreams closes the streams kept for later offers (protocol 1.4),
// which count against the streams each provider lets this node hold; the
// engine keeps streams again from its next delegation on. A node need not
// call it: kept streams go after seconds idle, and when the engine stops.
func (e *Engine) CloseIdleStreams() { e.idle.closeIdle() }
