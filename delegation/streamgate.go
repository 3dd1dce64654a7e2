package delegation

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Backpressure from stream limits. libp2p's resource manager caps the
// streams one peer may hold open to a node (kith's
// limits.max_streams_per_peer, 64 by default; libp2p's own limits scale
// with the machine) and refuses one more by resetting it with
// network.StreamResourceLimitExceeded before any handler sees it; a
// requester's own resource manager refuses an outbound stream over its
// limits with network.ErrResourceLimitExceeded. Either means "too many at
// once", not "unreachable": the requester's other streams to that
// provider free a place as their delegations end.
//
// So a requester counts the delegation streams it holds open to each
// provider (kept ones too: the provider counts them) and, once a new one
// was refused, opens no more than it then held, less one for the other
// protocols' streams, until one of them closes; the offers beyond wait in
// the order they came. A refused attempt is not one of the provider's
// maxUnacceptedAttempts while other streams to it are open; with none
// open, the refusal is the provider's answer to this requester, and
// counts. The limit learned rises by one each gateProbe without a
// refusal, whether or not a stream closed meanwhile, so that a provider
// that raised its limit, or a refusal caused by another protocol's burst,
// costs throughput only for a while; it is forgotten once no stream to
// the provider is open or waits.
type streamGates struct {
	mu    sync.Mutex
	peers map[peer.ID]*streamGate
	now   func() time.Time
	probe time.Duration // gateProbe; tests shorten it
}

type streamGate struct {
	open    int           // delegation streams open to the peer
	limit   int           // most open at once; 0: none learned
	learned time.Time     // when limit was last set or raised
	waiters []*gateWaiter // in order
	probe   *time.Timer   // raises the limit while offers wait; nil when none is due
}

// gateWaiter is a new stream waiting for a place. It receives once it
// holds one: nil, a place for a new stream, or, when it takes one, a kept
// stream whose delegation just ended (handKept), which holds its place.
type gateWaiter struct {
	got       chan *idleStream
	takesKept bool
}

// gateProbe is how long a learned limit holds before it is raised by one.
const gateProbe = 5 * time.Second

func newStreamGates(now func() time.Time) *streamGates {
	return &streamGates{peers: map[peer.ID]*streamGate{}, now: now, probe: gateProbe}
}

// acquire takes a place for a new stream to p, waiting while p's learned
// limit is reached. A waiter that takesKept may be handed a kept stream
// instead (handKept), which it returns; else the place is for a stream
// the caller opens. It fails only when ctx ends first.
func (gs *streamGates) acquire(ctx context.Context, p peer.ID, takesKept bool) (*idleStream, error) {
	gs.mu.Lock()
	g := gs.peers[p]
	if g == nil {
		g = &streamGate{}
		gs.peers[p] = g
	}
	gs.raise(g)
	if len(g.waiters) == 0 && g.free() {
		g.open++
		gs.mu.Unlock()
		return nil, nil
	}
	w := &gateWaiter{got: make(chan *idleStream, 1), takesKept: takesKept}
	g.waiters = append(g.waiters, w)
	gs.arm(p, g)
	gs.mu.Unlock()
	select {
	case is := <-w.got:
		return is, nil
	case <-ctx.Done():
	}
	gs.mu.Lock()
	handed := true
	for i, x := range g.waiters {
		if x == w {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			handed = false
			gs.handOn(p, g) // forgets g if that was all
			break
		}
	}
	gs.mu.Unlock()
	if handed {
		// A place came with the end: give it on.
		if is := <-w.got; is != nil {
			_ = is.s.Close() // releases its place
		} else {
			gs.release(p)
		}
	}
	return nil, context.Cause(ctx)
}

// free reports whether g has a place; gs.mu is held.
func (g *streamGate) free() bool { return g.limit == 0 || g.open < g.limit }

// raise lifts g's learned limit by one for each gateProbe it held without
// a refusal; gs.mu is held.
func (gs *streamGates) raise(g *streamGate) {
	if g.limit == 0 {
		return
	}
	if now := gs.now(); now.Sub(g.learned) >= gs.probe {
		g.limit++
		g.learned = now
	}
}

// release gives back a place taken by acquire: the stream closed, or was
// never opened. The next waiter, if the limit lets it, takes the place.
func (gs *streamGates) release(p peer.ID) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.peers[p]
	if g == nil {
		return
	}
	g.open--
	gs.raise(g)
	gs.handOn(p, g)
}

// handOn gives g's free places to its waiters, in order, and forgets g
// once nothing is open or waiting; gs.mu is held.
func (gs *streamGates) handOn(p peer.ID, g *streamGate) {
	for len(g.waiters) > 0 && g.free() {
		w := g.waiters[0]
		g.waiters = g.waiters[1:]
		g.open++
		w.got <- nil
	}
	if g.open <= 0 && len(g.waiters) == 0 {
		if g.probe != nil {
			g.probe.Stop()
		}
		delete(gs.peers, p)
	}
}

// arm makes sure that, while offers wait under a learned limit, the limit
// is raised when due even if none of the open streams closes (their tasks
// may run for minutes); gs.mu is held.
func (gs *streamGates) arm(p peer.ID, g *streamGate) {
	if g.probe != nil || g.limit == 0 || len(g.waiters) == 0 {
		return
	}
	g.probe = time.AfterFunc(max(0, g.learned.Add(gs.probe).Sub(gs.now())), func() {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		g.probe = nil
		if gs.peers[p] != g {
			return
		}
		gs.raise(g)
		gs.handOn(p, g)
		gs.arm(p, g)
	})
}

// handKept hands is, a kept stream to p whose delegation just ended, to
// the first offer waiting for a place that takes one, and reports whether
// one did: the stream keeps its place, and the offer skips a new stream.
func (gs *streamGates) handKept(p peer.ID, is *idleStream) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.peers[p]
	if g == nil {
		return false
	}
	for i, w := range g.waiters {
		if w.takesKept {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			w.got <- is
			return true
		}
	}
	return false
}

// refused notes that a new stream to p, whose place was just released,
// was refused as over a stream limit. It reports whether other streams to
// p are open, so that the refusal is backpressure, not a refusal of this
// requester: the limit is then set below them.
func (gs *streamGates) refused(p peer.ID) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.peers[p]
	if g == nil || g.open == 0 {
		return false
	}
	g.limit = max(1, g.open-1)
	g.learned = gs.now()
	if g.probe != nil {
		g.probe.Stop() // due later now
		g.probe = nil
	}
	gs.arm(p, g)
	return true
}

// waiting is how many new streams to p wait for a place.
func (gs *streamGates) waiting(p peer.ID) int {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g := gs.peers[p]; g != nil {
		return len(g.waiters)
	}
	return 0
}

// overLimit reports whether err is a stream refused as over a resource
// limit: this node's own (opening it), or the remote's (a reset with
// StreamResourceLimitExceeded). The second also says where: remote.
func overLimit(err error) (over, remote bool) {
	if errors.Is(err, network.ErrResourceLimitExceeded) {
		return true, false
	}
	var se *network.StreamError
	if errors.As(err, &se) && se.Remote && se.ErrorCode == network.StreamResourceLimitExceeded {
		return true, true
	}
	return false, false
}

// gatedStream is a delegation stream that gives its place back to the
// gates once closed or reset.
type gatedStream struct {
	Stream
	once    sync.Once
	release func()
}

func (s *gatedStream) Close() error {
	err := s.Stream.Close()
	s.once.Do(s.release)
	return err
}

func (s *gatedStream) Reset() error {
	err := s.Stream.Reset()
	s.once.Do(s.release)
	return err
}

// Conn is the libp2p connection the stream runs over, or nil (limited
// reads it).
func (s *gatedStream) Conn() network.Conn {
	if c, ok := s.Stream.(interface{ Conn() network.Conn }); ok {
		return c.Conn()
	}
	return nil
}
