package plan

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// node is one node of a mocknet mesh: a libp2p host, a badger store on
// disk, a delegation engine and a plan coordinator, which can be stopped
// and started again on the same store (a restart of the process).
type node struct {
	t     testing.TB
	id    *crypto.Identity
	host  host.Host
	dir   string
	mesh  *mesh
	profs func() []delegation.Profile

	mu     sync.Mutex
	st     *store.Store
	eng    *delegation.Engine
	co     *Coordinator
	cancel context.CancelFunc
	done   chan error
}

type mesh struct {
	mn    mocknet.Mocknet
	nodes []*node
}

// Candidates: every other node of the mesh.
func (m *mesh) Candidates(_ context.Context, _ string) []peer.ID {
	var out []peer.ID
	for _, n := range m.nodes {
		out = append(out, n.host.ID())
	}
	return out
}

type hostDialer struct{ h host.Host }

func (d hostDialer) OpenStream(ctx context.Context, p peer.ID) (delegation.Stream, error) {
	return d.h.NewStream(ctx, p, protocol.ID)
}

// newMesh makes n connected nodes; profiles(i) lists node i's profiles.
func newMesh(t testing.TB, n int, profiles func(i int) []delegation.Profile) *mesh {
	t.Helper()
	m := &mesh{mn: mocknet.New()}
	t.Cleanup(func() { m.mn.Close() })
	for i := 0; i < n; i++ {
		id, err := crypto.GenerateIdentity()
		if err != nil {
			t.Fatal(err)
		}
		h, err := m.mn.AddPeer(id.Libp2pKey(), ma.StringCast("/ip4/127.0.0.1/tcp/4001"))
		if err != nil {
			t.Fatal(err)
		}
		i := i
		m.nodes = append(m.nodes, &node{t: t, id: id, host: h, mesh: m, dir: filepath.Join(t.TempDir(), "store"),
			profs: func() []delegation.Profile { return profiles(i) }})
	}
	if err := m.mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := m.mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	for _, nd := range m.nodes {
		nd.start()
		t.Cleanup(nd.stop)
	}
	return m
}

func (n *node) start() {
	n.t.Helper()
	st, err := store.Open(n.dir, store.Options{})
	if err != nil {
		n.t.Fatal(err)
	}
	eng, err := delegation.New(delegation.Config{
		Identity: n.id, Store: st, Dialer: hostDialer{n.host}, Finder: n.mesh, Profiles: n.profs(),
		Conn: protocol.ConnOptions{IOTimeout: 2 * time.Second}, ReattachBackoff: 20 * time.Millisecond,
		MaxRemoteConcurrent: 128, MaxRemotePerPeer: 128, MaxUntrustedRemote: 128,
	})
	if err != nil {
		n.t.Fatal(err)
	}
	co, err := New(Config{Engine: eng, Store: st, Finder: n.mesh})
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- eng.Run(ctx) }()
	<-eng.Started()
	n.host.SetStreamHandler(protocol.ID, func(s network.Stream) { eng.HandleStream(s, s.Conn().RemotePeer()) })
	go func() { done <- co.Run(ctx) }()
	n.mu.Lock()
	n.st, n.eng, n.co, n.cancel, n.done = st, eng, co, cancel, done
	n.mu.Unlock()
}

// stop ends the node like a process exit: streams reset, engine and
// coordinator stopped, store closed (the host stays, as the machine does).
func (n *node) stop() {
	n.mu.Lock()
	cancel, done, st := n.cancel, n.done, n.st
	n.cancel = nil
	n.mu.Unlock()
	if cancel == nil {
		return
	}
	n.host.RemoveStreamHandler(protocol.ID)
	for _, c := range n.host.Network().Conns() {
		for _, s := range c.GetStreams() {
			_ = s.Reset()
		}
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			n.t.Errorf("run: %v", err)
		}
	}
	if err := st.Close(); err != nil {
		n.t.Errorf("store close: %v", err)
	}
}

func (n *node) coord() *Coordinator {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.co
}

func (n *node) store() *store.Store {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st
}

// worker is a Go handler that counts its runs by task, can block until
// released, and answers with reply(task text).
type worker struct {
	name    string
	mu      sync.Mutex
	runs    map[string]int // first line of the task text (after any decisions) → runs
	tasks   []string
	block   map[string]chan struct{}
	started chan string
	fail    bool
	reply   func(text string) string
}

func newWorker(name string) *worker {
	return &worker{name: name, runs: map[string]int{}, block: map[string]chan struct{}{}, started: make(chan string, 64)}
}

// key is what identifies a subtask's task: its last line, which the
// plans in these tests make unique ("task: <id>").
func key(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "task: ") {
			return strings.TrimPrefix(lines[i], "task: ")
		}
	}
	return lines[len(lines)-1]
}

// blockOn makes tasks with key k wait until release(k).
func (w *worker) blockOn(k string) {
	w.mu.Lock()
	w.block[k] = make(chan struct{})
	w.mu.Unlock()
}

func (w *worker) release(k string) {
	w.mu.Lock()
	ch := w.block[k]
	w.mu.Unlock()
	close(ch)
}

func (w *worker) count(k string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs[k]
}

func (w *worker) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.tasks...)
}

func (w *worker) handle(ctx context.Context, task executor.Task, _ func(executor.Update)) (executor.Result, error) {
	k := key(task.Text)
	w.mu.Lock()
	w.runs[k]++
	w.tasks = append(w.tasks, task.Text)
	ch := w.block[k]
	fail := w.fail
	w.mu.Unlock()
	w.started <- k
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return executor.Result{}, context.Cause(ctx)
		}
	}
	if fail {
		return executor.Result{}, errors.New(w.name + " fails")
	}
	out := "[" + w.name + "] " + k
	if w.reply != nil {
		out = w.reply(task.Text)
	}
	return executor.Result{Text: out, Usage: executor.Usage{Prompt: 1, Completion: 1, Total: 2}}, nil
}

func (w *worker) profile(name string) delegation.Profile {
	return delegation.Profile{Profile: protocol.Profile{Name: name, MaxBudgetTokens: 100000}, Executor: executor.HandlerFunc(w.handle)}
}

func waitStarted(t *testing.T, w *worker, k string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case got := <-w.started:
			if got == k {
				return
			}
		case <-deadline:
			t.Fatalf("%s never started %q", w.name, k)
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitPlan(t *testing.T, c *Coordinator, id protocol.DelegationID) View {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait for plan %s: %v (state %s)", id, err, v.State)
	}
	return v
}

func parse(t *testing.T, name, text string) *Spec {
	t.Helper()
	s, err := Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func step(v View, id string) StepView {
	for _, s := range v.Steps {
		if s.ID == id {
			return s
		}
	}
	return StepView{}
}
