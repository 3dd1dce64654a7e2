package delegation

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/internal/promread"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// tcpHost is a real libp2p host on loopback TCP whose resource manager
// lets one peer hold at most streamsPerPeer streams to it (0: libp2p's
// defaults), as kith's limits.max_streams_per_peer does.
func tcpHost(t *testing.T, id *crypto.Identity, streamsPerPeer int) host.Host {
	t.Helper()
	limits := rcmgr.DefaultLimits.AutoScale()
	if streamsPerPeer > 0 {
		n := rcmgr.LimitVal(streamsPerPeer)
		limits = rcmgr.PartialLimitConfig{
			PeerDefault:         rcmgr.ResourceLimits{Streams: n, StreamsInbound: n},
			ProtocolPeerDefault: rcmgr.ResourceLimits{Streams: n, StreamsInbound: n},
		}.Build(limits)
	}
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits), rcmgr.WithMetricsDisabled())
	if err != nil {
		t.Fatal(err)
	}
	h, err := libp2p.New(libp2p.Identity(id.Libp2pKey()), libp2p.ResourceManager(rm), libp2p.DisableMetrics(),
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.Transport(tcp.NewTCPTransport))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// TestStreamLimitIsBackpressure: a provider whose resource manager lets a
// peer hold 8 streams, with 64 remote slots, gets 40 offers at once from
// one requester. The streams over its limit are reset before any handler
// sees them; the requester takes that as backpressure and holds its next
// streams back until its own close: every offer runs at the provider or
// waits for a place, and every delegation completes. (Before, each refused
// stream was a failed attempt: five of them, and the delegation failed
// provider_unreachable; and the 40 capability queries of a first contact
// went out at once, and most of them were refused too.)
func TestStreamLimitIsBackpressure(t *testing.T) {
	streamLimitScenario(t, 0, 1)
}

// TestRefusalsAreNotAttempts: the requester probes the provider's limit
// every few milliseconds, so that offers waiting for a place are refused
// again and again while the tasks hold their streams: twice as many
// refusals as the offers' attempts that would fail them all if each
// counted. None fails.
func TestRefusalsAreNotAttempts(t *testing.T) {
	streamLimitScenario(t, 5*time.Millisecond, 2*maxUnacceptedAttempts*40)
}

// streamLimitScenario sends offers to a provider that lets a peer hold
// limit streams, holds every task until each offer runs or waits for a
// place and the streams refused reach refused, then lets them all
// complete. probe, when set, is how often the requester raises the limit
// it learned.
func streamLimitScenario(t *testing.T, probe time.Duration, refused int) {
	const (
		limit  = 8
		offers = 40
	)
	ids := make([]*crypto.Identity, 2)
	for i := range ids {
		var err error
		if ids[i], err = crypto.GenerateIdentity(); err != nil {
			t.Fatal(err)
		}
	}
	ha, hb := tcpHost(t, ids[0], 0), tcpHost(t, ids[1], limit)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := ha.Connect(ctx, peer.AddrInfo{ID: hb.ID(), Addrs: hb.Addrs()}); err != nil {
		t.Fatal(err)
	}

	// The provider holds every task until released.
	release := make(chan struct{})
	var running sync.Map
	hold := executor.HandlerFunc(func(ctx context.Context, task executor.Task, _ func(executor.Update)) (executor.Result, error) {
		running.Store(task.Text, true)
		select {
		case <-release:
			return executor.Result{Text: "done: " + task.Text}, nil
		case <-ctx.Done():
			return executor.Result{}, context.Cause(ctx)
		}
	})
	engines := make([]*Engine, 2)
	for i, h := range []host.Host{ha, hb} {
		st, err := store.Open(filepath.Join(t.TempDir(), "store"), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		other := []host.Host{hb, ha}[i]
		if err := st.SetTrust(other.ID(), protocol.Trusted, "test"); err != nil {
			t.Fatal(err)
		}
		eng, err := New(Config{
			Identity: ids[i], Store: st, Dialer: hostDialer{h},
			Profiles:            []Profile{{Profile: protocol.Profile{Name: "hold", MaxBudgetTokens: 1000}, Executor: hold}},
			MaxRemoteConcurrent: 64, MaxRemotePerPeer: 64,
			Conn:            protocol.ConnOptions{IOTimeout: 10 * time.Second},
			ReattachBackoff: 20 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if probe > 0 {
			eng.gates.probe = probe
		}
		runCtx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- eng.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
		<-eng.Started()
		h.SetStreamHandler(protocol.ID, func(s network.Stream) { eng.HandleStream(s, s.Conn().RemotePeer()) })
		engines[i] = eng
	}
	a := engines[0]
	// The provider reads kept streams until the requester lets them go:
	// first, so that its engine stops at once.
	t.Cleanup(a.CloseIdleStreams)
	ids2 := make([]protocol.DelegationID, offers)
	errs := make(chan error, offers)
	var wg sync.WaitGroup
	for i := range offers {
		wg.Go(func() {
			id, err := a.Delegate(ctx, Request{Profile: "hold", Peer: hb.ID(), Task: textTask(fmt.Sprint("task ", i)), BudgetTokens: 10})
			if err != nil {
				errs <- err
				return
			}
			ids2[i] = id
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("delegate: %v", err)
	}
	count := func() int {
		n := 0
		running.Range(func(any, any) bool { n++; return true })
		return n
	}
	labtest.WaitFor(t, 30*time.Second, fmt.Sprintf("every offer running or waiting for a place, after %d refusals", refused), func() bool {
		for _, id := range ids2 {
			if d, err := a.Get(id); err == nil && d.State.Terminal() {
				return true // failed early: reported below
			}
		}
		return count()+a.gates.waiting(hb.ID()) == offers && promread.Counters(a.m.streamsRefused, "where")["remote"] >= uint64(refused)
	})
	if n := count(); n > limit || n == 0 {
		t.Fatalf("%d tasks run at once under a limit of %d streams", n, limit)
	}
	for _, id := range ids2 {
		if d, err := a.Get(id); err != nil || d.State.Terminal() {
			t.Fatalf("%s before the tasks end: %s %s (%v)", id, d.State, d.Reason, err)
		}
	}
	close(release)
	for _, id := range ids2 {
		d, err := a.Wait(ctx, id)
		if err != nil {
			t.Fatalf("wait %s: %v", id, err)
		}
		if d.State != protocol.StateCompleted {
			t.Fatalf("%s ended %s: %s", id, d.State, d.Reason)
		}
	}
	if n := count(); n != offers {
		t.Fatalf("the provider ran %d tasks, want %d", n, offers)
	}
	if got := a.gates.waiting(hb.ID()); got != 0 {
		t.Fatalf("%d offers still wait for a place", got)
	}
}

// TestStreamGate: places are handed on in the order offers came, and a
// kept stream to the first that takes one; one whose caller gives up
// leaves the line;
// a refusal with nothing else open is not backpressure; a learned limit
// rises by one each probe interval, also while nothing closes; a peer with
// nothing open or waiting is forgotten.
func TestStreamGate(t *testing.T) {
	const p = peer.ID("provider")
	gs := newStreamGates(time.Now)
	gs.probe = time.Hour
	ctx := context.Background()
	if gs.refused(p) {
		t.Fatal("a refusal with no stream open is backpressure")
	}
	for range 3 {
		if _, err := gs.acquire(ctx, p, false); err != nil {
			t.Fatal(err)
		}
	}
	// The fourth stream was refused: its place is back, three are open.
	if _, err := gs.acquire(ctx, p, false); err != nil {
		t.Fatal(err)
	}
	gs.release(p)
	if !gs.refused(p) {
		t.Fatal("a refusal beside three open streams is not backpressure")
	}
	// The limit is now 2: with 3 open, new streams wait, in order.
	got := make(chan int, 3)
	cctx, cancel := context.WithCancel(ctx)
	for i := range 3 {
		c := ctx
		if i == 1 {
			c = cctx
		}
		go func() {
			if _, err := gs.acquire(c, p, false); err == nil {
				got <- i
			}
		}()
		labtest.WaitFor(t, 5*time.Second, "a waiter", func() bool { return gs.waiting(p) == i+1 })
	}
	cancel() // the second leaves the line
	labtest.WaitFor(t, 5*time.Second, "the second gone", func() bool { return gs.waiting(p) == 2 })
	gs.release(p) // 2 open: at the limit, nobody goes
	select {
	case i := <-got:
		t.Fatalf("waiter %d went at the limit", i)
	default:
	}
	gs.release(p) // 1 open: the first goes
	if i := <-got; i != 0 {
		t.Fatalf("waiter %d went first", i)
	}
	gs.release(p)
	if i := <-got; i != 2 {
		t.Fatalf("waiter %d went second", i)
	}
	// A kept stream goes to the first waiter that takes one, keeping its
	// place; a fresh place to the first in line.
	plain, takes := make(chan *idleStream, 1), make(chan *idleStream, 1)
	for i, ch := range []chan *idleStream{plain, takes} {
		go func() {
			is, err := gs.acquire(ctx, p, ch == takes)
			if err == nil {
				ch <- is
			}
		}()
		labtest.WaitFor(t, 5*time.Second, "a waiter", func() bool { return gs.waiting(p) == i+1 })
	}
	kept := &idleStream{}
	if !gs.handKept(p, kept) {
		t.Fatal("a kept stream not handed on to an offer that takes one")
	}
	if is := <-takes; is != kept {
		t.Fatalf("handed %p, want %p", is, kept)
	}
	if gs.handKept(p, kept) {
		t.Fatal("a kept stream handed to an offer that takes none")
	}
	gs.release(p) // 1 open of 2: the plain waiter
	if is := <-plain; is != nil {
		t.Fatal("a fresh place came with a stream")
	}
	gs.release(p)
	gs.release(p)
	gs.mu.Lock()
	n := len(gs.peers)
	gs.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d peers kept with nothing open", n)
	}

	// A learned limit rises while offers wait, with nothing closing.
	gs.probe = 20 * time.Millisecond
	for range 2 {
		if _, err := gs.acquire(ctx, p, false); err != nil {
			t.Fatal(err)
		}
	}
	if !gs.refused(p) { // limit 1, with 2 open
		t.Fatal("no backpressure")
	}
	done := make(chan error, 1)
	go func() {
		_, err := gs.acquire(ctx, p, false)
		done <- err
	}()
	select {
	case err := <-done: // after two raises: limit 3, with 2 open
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the limit never rose")
	}
}

// TestCapabilityQueriesShared: callers that need a peer's capabilities at
// once share one query stream; once that answer is past half its life and
// the peer cannot be asked, the answer, still live, serves.
func TestCapabilityQueriesShared(t *testing.T) {
	var opened atomic.Int32
	nodes := newMesh(t, 2, func(i int, c *Config) {
		if i == 0 {
			c.Dialer = countingDialer{Dialer: c.Dialer, n: &opened}
		}
	})
	a, b := nodes[0].engine(), nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	got := make([]*protocol.CapabilityAssertion, 20)
	errs := make([]error, len(got))
	for i := range got {
		wg.Go(func() { got[i], errs[i] = a.capabilities(ctx, b.id.PeerID()) })
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] == nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
	}
	if n := opened.Load(); n != 1 {
		t.Fatalf("%d query streams for %d callers, want 1", n, len(got))
	}

	// Past half its life, the answer is asked again; the peer no longer
	// answers, and the answer still live serves.
	a.reqMu.Lock()
	k := a.caps[b.id.PeerID()]
	stale := *k.query
	life := stale.ExpiresAt.Sub(stale.IssuedAt)
	stale.IssuedAt = time.Now().Add(-life * 3 / 4)
	stale.ExpiresAt = stale.IssuedAt.Add(life)
	k.query = &stale
	a.caps[b.id.PeerID()] = k
	a.reqMu.Unlock()
	b.host.RemoveStreamHandler(protocol.ID)
	q, err := a.capabilities(ctx, b.id.PeerID())
	if err != nil || q != &stale {
		t.Fatalf("with the peer silent: %p, %v; want the live answer %p", q, err, &stale)
	}
	if n := opened.Load(); n != 2 {
		t.Fatalf("%d query streams, want 2 (the refresh tried)", n)
	}
	// Once expired, the failure is the caller's.
	a.reqMu.Lock()
	stale.ExpiresAt = time.Now().Add(-time.Second)
	a.reqMu.Unlock()
	if _, err := a.capabilities(ctx, b.id.PeerID()); err == nil {
		t.Fatal("an expired answer served")
	}
}
