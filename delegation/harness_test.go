package delegation

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// testNode is one node of a mocknet: a libp2p host, an on-disk store and a
// delegation engine that can be stopped and started again on the same
// store directory (a restart).
type testNode struct {
	t    *testing.T
	id   *crypto.Identity
	host host.Host
	dir  string
	mn   mocknet.Mocknet // the network the node is on

	mu     sync.Mutex
	eng    *Engine
	st     *store.Store
	cancel context.CancelFunc
	done   chan error
	cfg    func(*Config)
	// storeMetrics are the node's store's, across restarts.
	storeMetrics *store.Metrics

	traceMu sync.Mutex
	traced  []protocol.MessageType
}

type hostDialer struct{ h host.Host }

func (d hostDialer) OpenStream(ctx context.Context, p peer.ID) (Stream, error) {
	return d.h.NewStream(ctx, p, protocol.ID)
}

// newMesh makes n linked and connected nodes. cfg adjusts each node's
// engine config (index, config).
func newMesh(t *testing.T, n int, cfg func(i int, c *Config)) []*testNode {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	nodes := make([]*testNode, n)
	for i := range nodes {
		id, err := crypto.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		h, err := mn.AddPeer(id.Libp2pKey(), ma.StringCast("/ip4/127.0.0.1/tcp/4001"))
		if err != nil {
			t.Fatal(err)
		}
		i := i
		nodes[i] = &testNode{t: t, id: id, host: h, mn: mn, dir: filepath.Join(t.TempDir(), "store"),
			storeMetrics: store.NewMetrics(prometheus.NewRegistry())}
		if cfg != nil {
			nodes[i].cfg = func(c *Config) { cfg(i, c) }
		}
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		nd.start()
		t.Cleanup(nd.stop)
	}
	return nodes
}

func (n *testNode) start() {
	n.t.Helper()
	st, err := store.Open(n.dir, store.Options{Metrics: n.storeMetrics})
	if err != nil {
		n.t.Fatal(err)
	}
	c := Config{
		Identity: n.id, Store: st, Dialer: hostDialer{n.host},
		Profiles: []Profile{{Profile: protocol.Profile{Name: "echo", MaxBudgetTokens: 1000}, Executor: executor.Echo{}}},
		Conn:     protocol.ConnOptions{IOTimeout: 2 * time.Second},
		Trace: func(_ Direction, _ peer.ID, m protocol.Message) {
			n.traceMu.Lock()
			n.traced = append(n.traced, m.Type())
			n.traceMu.Unlock()
		},
		ReattachBackoff: 20 * time.Millisecond,
	}
	if n.cfg != nil {
		n.cfg(&c)
	}
	eng, err := New(c)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	<-eng.Started() // so that HandleStream is live
	n.host.SetStreamHandler(protocol.ID, func(s network.Stream) { eng.HandleStream(s, s.Conn().RemotePeer()) })
	n.mu.Lock()
	n.eng, n.st, n.cancel, n.done = eng, st, cancel, done
	n.mu.Unlock()
}

// stop stops the engine and closes the store, like a process exit (the
// host stays, as the machine does).
func (n *testNode) stop() {
	n.mu.Lock()
	cancel, done, st := n.cancel, n.done, n.st
	n.cancel = nil
	n.mu.Unlock()
	if cancel == nil {
		return
	}
	n.host.RemoveStreamHandler(protocol.ID)
	// Reset live streams so that blocked handlers end, as they would when
	// the process dies.
	for _, c := range n.host.Network().Conns() {
		for _, s := range c.GetStreams() {
			_ = s.Reset()
		}
	}
	cancel()
	if err := <-done; err != nil {
		n.t.Errorf("engine run: %v", err)
	}
	if err := st.Close(); err != nil {
		n.t.Errorf("store close: %v", err)
	}
}

// crash stops the node the way kill -9 does: the store goes first, so
// nothing the dying engine tries to write lands.
func (n *testNode) crash() {
	n.mu.Lock()
	st := n.st
	n.mu.Unlock()
	_ = st.Close()
	n.mu.Lock()
	cancel, done := n.cancel, n.done
	n.cancel = nil
	n.mu.Unlock()
	n.host.RemoveStreamHandler(protocol.ID)
	for _, c := range n.host.Network().Conns() {
		for _, s := range c.GetStreams() {
			_ = s.Reset()
		}
	}
	cancel()
	<-done
}

func (n *testNode) engine() *Engine {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.eng
}

func (n *testNode) sawTypes() map[protocol.MessageType]bool {
	n.traceMu.Lock()
	defer n.traceMu.Unlock()
	out := map[protocol.MessageType]bool{}
	for _, t := range n.traced {
		out[t] = true
	}
	return out
}

func textTask(s string) protocol.Task {
	return protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart(s)}}
}

// delegateAndWait runs one delegation to completion (or the test's limit).
func delegateAndWait(t *testing.T, n *testNode, req Request) store.Delegation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := n.engine().Delegate(ctx, req)
	if err != nil {
		t.Fatalf("delegate: %v", err)
	}
	d, err := n.engine().Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v (state %s)", id, err, d.State)
	}
	// Wait leaves the offer out; the tests look at it too.
	if d, err = n.engine().Get(id); err != nil {
		t.Fatal(err)
	}
	return d
}

// blockingHandler is a Go handler that runs until released or cancelled.
type blockingHandler struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlocking() *blockingHandler {
	return &blockingHandler{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blockingHandler) handle(ctx context.Context, task executor.Task, emit func(executor.Update)) (executor.Result, error) {
	select {
	case b.started <- struct{}{}:
	case <-ctx.Done(): // a flood starts more tasks than anyone counts
		return executor.Result{}, context.Cause(ctx)
	}
	emit(executor.Update{Text: "working "})
	select {
	case <-b.release:
		out := "done: " + task.Text
		return executor.Result{Text: out, Usage: executor.Usage{Prompt: 1, Completion: 2, Total: 3}}, nil
	case <-ctx.Done():
		return executor.Result{}, context.Cause(ctx)
	}
}

func (b *blockingHandler) Release() { b.once.Do(func() { close(b.release) }) }

// slowPair starts two nodes that offer a "slow" profile whose tasks run
// block's handler until it is released (at the test's end at the latest).
func slowPair(t *testing.T) (a, b *testNode, block *blockingHandler) {
	t.Helper()
	block = newBlocking()
	t.Cleanup(block.Release)
	nodes := newMesh(t, 2, func(_ int, c *Config) {
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "slow", MaxBudgetTokens: 100}, Executor: executor.HandlerFunc(block.handle)})
	})
	return nodes[0], nodes[1], block
}

func waitStarted(t *testing.T, b *blockingHandler) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
}

// providerRecord returns n's record, as provider, of delegation id once it
// has ended there. A requester may hear of a result before the provider's
// record of it is durable (protocol 1.5, provisional results).
func providerRecord(t *testing.T, n *testNode, id protocol.DelegationID) store.Delegation {
	t.Helper()
	var d store.Delegation
	labtest.WaitFor(t, 15*time.Second, "the provider's record of "+id.String(), func() bool {
		var err error
		d, err = n.st.GetDelegation(store.RoleProvider, id)
		return err == nil && d.State.Terminal()
	})
	return d
}
