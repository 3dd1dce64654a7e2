package delegation

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// A requester's first attempt overlaps the write that creates its record:
// the provider's answer is read and checked meanwhile, and written after.

// heardResult returns a Config hook for node 0 of a mesh that closes the
// returned channel once node 0 receives a result, and records the ID of
// the first offer it sends.
func heardResult() (func(i int, c *Config), <-chan struct{}, func() protocol.DelegationID) {
	result := make(chan struct{})
	var (
		once  sync.Once
		mu    sync.Mutex
		offer protocol.DelegationID
	)
	cfg := func(i int, c *Config) {
		if i != 0 {
			return
		}
		c.Trace = func(dir Direction, _ peer.ID, m protocol.Message) {
			switch m := m.(type) {
			case *protocol.DelegationOffer:
				mu.Lock()
				if offer == (protocol.DelegationID{}) {
					offer = m.ID
				}
				mu.Unlock()
			case *protocol.DelegationResult:
				if dir == Received {
					once.Do(func() { close(result) })
				}
			}
		}
	}
	return cfg, result, func() protocol.DelegationID {
		mu.Lock()
		defer mu.Unlock()
		return offer
	}
}

// createdMesh starts a requester a, whose answers heardResult observes
// and whose log goes to logs, and a provider b, with a context for the
// test.
func createdMesh(t *testing.T) (ctx context.Context, a, b *testNode, result <-chan struct{}, offered func() protocol.DelegationID, logs *lockedBuffer) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	cfg, result, offered := heardResult()
	logs = &lockedBuffer{}
	nodes := newMesh(t, 2, func(i int, c *Config) {
		cfg(i, c)
		if i == 0 {
			c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		}
	})
	return ctx, nodes[0], nodes[1], result, offered, logs
}

// lockedBuffer is a bytes.Buffer that goroutines may write at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestAnswerReadWhileCreated: the requester's record is written only once
// the provider's result has come (a hook holds the write): the reader took
// the accept and the result meanwhile, and stores them after the record,
// in order, so the delegation completes with its whole log.
func TestAnswerReadWhileCreated(t *testing.T) {
	ctx, a, b, result, _, _ := createdMesh(t)
	a.engine().SetBeforeCreate(func(store.Delegation) error {
		select {
		case <-result:
			return nil
		case <-ctx.Done():
			return errors.New("the requester read no result before its record was written")
		}
	})
	id, err := a.engine().Delegate(ctx, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("ahead"), BudgetTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateCompleted || Output(d) != "ahead" {
		t.Fatalf("wait: %s %q (%s), %v", d.State, Output(d), d.Reason, err)
	}
	evs, err := a.st.Events(store.RoleRequester, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if len(types) < 2 || types[0] != EventAccepted || types[len(types)-1] != EventResult {
		t.Fatalf("the requester's log: %v, want the accept first and the result last", types)
	}
}

// TestCreateFailsAfterAnswer: when the write of the record fails after the
// provider's result came, Delegate reports the failure, and the follower
// ends without writing anything of the answer: no record appears.
func TestCreateFailsAfterAnswer(t *testing.T) {
	ctx, a, b, result, offered, logs := createdMesh(t)
	full := errors.New("no space left on device")
	a.engine().SetBeforeCreate(func(store.Delegation) error {
		select {
		case <-result:
		case <-ctx.Done():
		}
		return full
	})
	_, err := a.engine().Delegate(ctx, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("lost"), BudgetTokens: 100})
	if !errors.Is(err, full) {
		t.Fatalf("Delegate: %v, want the write's error", err)
	}
	select {
	case <-result:
	default:
		t.Fatal("the requester read no result before its record's write failed")
	}
	neverStored(t, ctx, a, offered(), logs)
}

// neverStored checks what follows a delegation id whose record's write
// failed: its follower ends, no record appears, and a's log (logs) says
// nothing of a result kept, as none was.
func neverStored(t *testing.T, ctx context.Context, a *testNode, id protocol.DelegationID, logs *lockedBuffer) {
	t.Helper()
	labtest.WaitFor(t, time.Until(deadline(ctx)), "the end of the follower of a delegation never stored", func() bool {
		a.engine().reqMu.Lock()
		defer a.engine().reqMu.Unlock()
		_, following := a.engine().outgoing[id]
		return !following
	})
	if d, err := a.st.DelegationInfo(store.RoleRequester, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a record of the failed delegation: %s, %v", d.State, err)
	}
	if l := logs.String(); strings.Contains(l, "stored here") || strings.Contains(l, "store result") {
		t.Fatalf("the requester's log speaks of a result it never stored:\n%s", l)
	}
}

// TestBufferWaitsForRecord: the reader's buffered events are written only
// once the record's write, claimed by another (as Delegate claims it), is
// done: after it when it succeeded, and not at all when it failed.
func TestBufferWaitsForRecord(t *testing.T) {
	n := newMesh(t, 1, nil)[0]
	e := n.engine()
	accepted := store.Event{Type: EventAccepted, State: protocol.StateAccepted, Data: []byte("accept")}

	failed := errors.New("no space left on device")
	cr := newCreated(e.requesterHalf, store.Delegation{}, time.Now())
	if !cr.claim() {
		t.Fatal("a fresh write was claimed already")
	}
	b := &eventBuffer{e: e.core, id: protocol.NewDelegationID(), cr: cr}
	if err := b.add(accepted); err != nil {
		t.Fatal(err)
	}
	cr.done(failed)
	if err := b.flush(); !errors.Is(err, failed) {
		t.Fatalf("flush after the record's write failed: %v, want its error", err)
	}

	d := store.Delegation{ID: protocol.NewDelegationID(), Role: store.RoleRequester, Peer: n.id.PeerID(), Remote: true,
		Profile: "echo", State: protocol.StateOffered, BudgetTokens: 100, Offer: []byte("offer"), Deadline: time.Now().Add(time.Minute)}
	cr = newCreated(e.requesterHalf, d, time.Now())
	if !cr.claim() {
		t.Fatal("a fresh write was claimed already")
	}
	b = &eventBuffer{e: e.core, id: d.ID, cr: cr}
	if err := b.add(accepted); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- b.flush() }()
	err := e.create(d)
	cr.done(err)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatalf("flush once the record is written: %v", err)
	}
	got, err := n.st.DelegationInfo(store.RoleRequester, d.ID)
	if err != nil || got.State != protocol.StateAccepted {
		t.Fatalf("the record after the flush: %s, %v", got.State, err)
	}
}
