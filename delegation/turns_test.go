package delegation

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/gpu"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// askHandler asks one question, then answers with what it was told. It
// records each call's turns, so a test can see what the executor was given.
type askHandler struct {
	calls atomic.Int32
	// usage is what it reports for its first turn (0: estimated).
	usage executor.Usage
}

func (h *askHandler) handle(_ context.Context, task executor.Task, emit func(executor.Update)) (executor.Result, error) {
	h.calls.Add(1)
	if len(task.Exchanges) == 0 {
		emit(executor.Update{Text: "thinking "})
		r := executor.AskInput("which language for " + task.Text + "?")
		r.Usage = h.usage
		return r, nil
	}
	last := task.Exchanges[len(task.Exchanges)-1]
	return executor.Result{Text: "asked " + last.Question + " told " + last.Answer}, nil
}

// askMesh is a requester (0) and a provider (1) whose profile "ask" asks
// once; the requester's clock can be moved.
func askMesh(t *testing.T, h *askHandler, skew *atomic.Int64) []*testNode {
	return newMesh(t, 2, func(i int, c *Config) {
		if i == 1 {
			c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "ask", MaxBudgetTokens: 1000}, Executor: executor.HandlerFunc(h.handle)})
		}
		if i == 0 && skew != nil {
			c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		}
	})
}

// askAndWait offers "ask" with task text from req to prov and waits until
// the provider's question has reached req.
func askAndWait(t *testing.T, req, prov *testNode, text string) protocol.DelegationID {
	t.Helper()
	id, err := req.engine().Delegate(context.Background(), Request{Profile: "ask", Peer: prov.id.PeerID(), Task: textTask(text), BudgetTokens: 500})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, req, id, protocol.StateInputRequired)
	return id
}

// waitState waits until the requester's record of id is in state s.
func waitState(t *testing.T, n *testNode, id protocol.DelegationID, s protocol.State) store.Delegation {
	t.Helper()
	var d store.Delegation
	var err error
	if !labtest.Until(20*time.Second, func() bool {
		d, err = n.engine().Get(id)
		return err == nil && d.State == s
	}) {
		t.Fatalf("timed out after 20s waiting for delegation %s %s: it is %s (reason %q, err %v)", id, s, d.State, d.Reason, err)
	}
	return d
}

func question(t *testing.T, n *testNode, id protocol.DelegationID) *protocol.DelegationStatus {
	t.Helper()
	evs, err := n.st.Events(store.RoleRequester, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].State == protocol.StateInputRequired && evs[i].Type == EventStatus {
			m, err := protocol.DecodeMessage(evs[i].Data)
			if err != nil {
				t.Fatal(err)
			}
			return m.(*protocol.DelegationStatus)
		}
	}
	t.Fatalf("no question in the log of %s", id)
	return nil
}

// TestMultiTurnOverMesh: input_required with a question, the provider's
// slot free while it waits, a reply, and a completed result whose proof
// verifies over both turns, on both sides' logs.
func TestMultiTurnOverMesh(t *testing.T) {
	h := &askHandler{}
	nodes := askMesh(t, h, nil)
	req, prov := nodes[0], nodes[1]
	ctx := context.Background()
	id := askAndWait(t, req, prov, "the report")
	q := question(t, req, id)
	if got := partsText(q.Partial); got != "which language for the report?" || q.Turn != 1 {
		t.Fatalf("question %q turn %d", got, q.Turn)
	}
	if q.Usage.Completion == 0 {
		t.Fatal("the question carries no usage so far")
	}
	pd, err := prov.st.DelegationInfo(store.RoleProvider, id)
	if err != nil || pd.State != protocol.StateInputRequired {
		t.Fatalf("provider record %v %v", pd.State, err)
	}
	if c := prov.engine().Capacity(); c.Active != 0 {
		t.Fatalf("the provider holds %d slots while waiting for input", c.Active)
	}
	if err := req.engine().Reply(ctx, id, textTask("English")); err != nil {
		t.Fatalf("reply: %v", err)
	}
	// A second answer to the same question is refused: it is answered.
	if err := req.engine().Reply(ctx, id, textTask("French")); !errors.Is(err, ErrNotWaiting) {
		t.Fatalf("second reply: %v, want ErrNotWaiting", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	d, err := req.engine().Wait(wctx, id)
	if err != nil || d.State != protocol.StateCompleted {
		t.Fatalf("state %s (%s) %v", d.State, d.Reason, err)
	}
	if d, err = req.engine().Get(id); err != nil { // with the offer, which Wait leaves out
		t.Fatal(err)
	}
	if got := Output(d); got != "asked which language for the report? told English" {
		t.Fatalf("output %q", got)
	}
	p, err := req.engine().Verify(id)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if p.Turns != 2 {
		t.Fatalf("proof covers %d turns, want 2", p.Turns)
	}
	if h.calls.Load() != 2 {
		t.Fatalf("handler called %d times", h.calls.Load())
	}
	// Usage spans both turns: the first turn's question is in it.
	if d.Usage.Completion <= executor.EstimateTokens("asked which language for the report? told English") {
		t.Fatalf("usage %+v covers only the last turn", d.Usage)
	}
	// The transcript covers the answer: a log whose answer differs does
	// not verify.
	evs, _ := req.st.Events(store.RoleRequester, id, 0)
	r, _ := Result(d)
	for i, ev := range evs {
		if ev.Type == EventTurn {
			forged := append([]store.Event(nil), evs...)
			c, _ := protocol.EncodeMessage(&protocol.DelegationContinue{ID: id, Turn: 2, Task: textTask("French")})
			forged[i].Data = c
			if err := matchProof(p, d, sha256.Sum256(d.Offer), outputSum(p, r), req.id.PeerID(), r, forged, false); !errors.Is(err, ErrProofInvalid) {
				t.Fatalf("a forged answer verifies: %v", err)
			}
		}
	}
	// A reply to a finished delegation changes nothing.
	if err := req.engine().Reply(ctx, id, textTask("late")); !errors.Is(err, ErrNotWaiting) {
		t.Fatalf("reply after the end: %v", err)
	}
}

// TestMultiTurnLocal: a local profile asks, and Reply answers in-process.
func TestMultiTurnLocal(t *testing.T) {
	h := &askHandler{}
	nodes := newMesh(t, 1, nil)
	n := nodes[0]
	if err := n.engine().Register("ask", h.handle); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := n.engine().Delegate(ctx, Request{Profile: "ask", Task: textTask("x")})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, n, id, protocol.StateInputRequired)
	if err := n.engine().Reply(ctx, id, textTask("Go")); err != nil {
		t.Fatal(err)
	}
	d := waitState(t, n, id, protocol.StateCompleted)
	if got := Output(d); got != "asked which language for x? told Go" {
		t.Fatalf("output %q", got)
	}
	if p, err := n.engine().Verify(id); err != nil || p.Turns != 2 {
		t.Fatalf("verify: %+v %v", p, err)
	}
}

// TestReplyRefusals: each bad reply is a typed error and changes nothing.
func TestReplyRefusals(t *testing.T) {
	var skew atomic.Int64
	h := &askHandler{}
	nodes := askMesh(t, h, &skew)
	req, prov := nodes[0], nodes[1]
	ctx := context.Background()

	if err := req.engine().Reply(ctx, protocol.NewDelegationID(), textTask("?")); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown: %v", err)
	}
	// Running, not waiting.
	b := newBlocking()
	if err := prov.engine().Register("slow", b.handle); err != nil {
		t.Fatal(err)
	}
	slow, err := req.engine().Delegate(ctx, Request{Profile: "slow", Peer: prov.id.PeerID(), Task: textTask("s"), BudgetTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, b)
	if err := req.engine().Reply(ctx, slow, textTask("?")); !errors.Is(err, ErrNotWaiting) {
		t.Fatalf("running: %v", err)
	}
	b.Release()
	// The provider has one slot for this peer: the next offer finds it
	// free once the slow task has ended (its slot goes back before its
	// result is sent). Offered sooner, it is rejected as busy.
	waitState(t, req, slow, protocol.StateCompleted)

	id := askAndWait(t, req, prov, "r")
	before, _ := req.st.DelegationInfo(store.RoleRequester, id)
	if err := req.engine().Reply(ctx, id, protocol.Task{}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty answer: %v", err)
	}
	skew.Store(int64(time.Hour))
	if err := req.engine().Reply(ctx, id, textTask("late")); !errors.Is(err, ErrDeadlinePassed) {
		t.Fatalf("past the deadline: %v", err)
	}
	skew.Store(0)
	after, _ := req.st.DelegationInfo(store.RoleRequester, id)
	if after.State != protocol.StateInputRequired || after.LastSeq != before.LastSeq {
		t.Fatalf("a refused reply changed the delegation: %s seq %d → %d", after.State, before.LastSeq, after.LastSeq)
	}
	if err := req.engine().Reply(ctx, id, textTask("Rust")); err != nil {
		t.Fatal(err)
	}
	waitState(t, req, id, protocol.StateCompleted)
}

// rawContinue sends a continuation as from's first message on a new stream
// to to, and returns the reject it gets (nil if none).
func rawContinue(t *testing.T, from *testNode, to peer.ID, c *protocol.DelegationContinue) *protocol.DelegationReject {
	t.Helper()
	s, err := from.host.NewStream(context.Background(), to, protocol.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := protocol.Dial(s, from.id, to, c, protocol.ConnOptions{IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := conn.Recv(5 * time.Second)
		if err != nil {
			return nil
		}
		if r, ok := m.(*protocol.DelegationReject); ok {
			return r
		}
	}
}

// TestProviderRefusesBadContinuations: a continuation from a peer that is
// not the requester, for an unknown delegation, out of turn, or while the
// task runs, is rejected with its typed reason and changes nothing.
func TestProviderRefusesBadContinuations(t *testing.T) {
	h := &askHandler{}
	nodes := newMesh(t, 3, func(i int, c *Config) {
		if i == 1 {
			c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "ask", MaxBudgetTokens: 1000}, Executor: executor.HandlerFunc(h.handle)})
		}
	})
	req, prov, mallory := nodes[0], nodes[1], nodes[2]
	ctx := context.Background()
	id := askAndWait(t, req, prov, "r")
	before, _ := prov.st.DelegationInfo(store.RoleProvider, id)

	cases := []struct {
		name string
		from *testNode
		c    *protocol.DelegationContinue
		want protocol.RejectReason
	}{
		{"not the requester", mallory, &protocol.DelegationContinue{ID: id, Turn: 2, Task: textTask("evil")}, protocol.ReasonUnknownDelegation},
		{"unknown delegation", req, &protocol.DelegationContinue{ID: protocol.NewDelegationID(), Turn: 2, Task: textTask("x")}, protocol.ReasonUnknownDelegation},
		{"turn out of order", req, &protocol.DelegationContinue{ID: id, Turn: 3, Task: textTask("x")}, protocol.ReasonTurnOutOfOrder},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rawContinue(t, tc.from, prov.id.PeerID(), tc.c)
			if r == nil || r.Reason != tc.want {
				t.Fatalf("reject %+v, want %s", r, tc.want)
			}
			after, _ := prov.st.DelegationInfo(store.RoleProvider, id)
			if after.State != protocol.StateInputRequired || after.LastSeq != before.LastSeq {
				t.Fatalf("provider record changed: %s seq %d → %d", after.State, before.LastSeq, after.LastSeq)
			}
		})
	}
	if err := req.engine().Reply(ctx, id, textTask("Zig")); err != nil {
		t.Fatal(err)
	}
	waitState(t, req, id, protocol.StateCompleted)
	if r := rawContinue(t, req, prov.id.PeerID(), &protocol.DelegationContinue{ID: id, Turn: 3, Task: textTask("more")}); r == nil || r.Reason != protocol.ReasonNotWaiting {
		t.Fatalf("continuation of a finished delegation: %+v", r)
	}
}

// TestInputWithoutMultiTurnFails: a provider never pauses an offer that was
// not multi_turn (a requester older than 1.3): the question fails it.
func TestInputWithoutMultiTurnFails(t *testing.T) {
	h := &askHandler{}
	nodes := askMesh(t, h, nil)
	req, prov := nodes[0], nodes[1]
	offer := &protocol.DelegationOffer{ID: protocol.NewDelegationID(), Profile: "ask", BudgetTokens: 100, HopLimit: 2, Task: textTask("old")}
	s, err := req.host.NewStream(context.Background(), prov.id.PeerID(), protocol.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := protocol.Dial(s, req.id, prov.id.PeerID(), offer, protocol.ConnOptions{IOTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := c.Recv(10 * time.Second)
		if err != nil {
			t.Fatalf("no result: %v", err)
		}
		if st, ok := m.(*protocol.DelegationStatus); ok && st.State == protocol.StateInputRequired {
			t.Fatal("a provider asked a requester that cannot answer")
		}
		if r, ok := m.(*protocol.DelegationResult); ok {
			if r.State != protocol.StateFailed || !strings.HasPrefix(r.Reason, ReasonInputUnsupported) {
				t.Fatalf("result %s %q", r.State, r.Reason)
			}
			return
		}
	}
}

// TestBudgetSpentBeforeQuestionFails: a question asked with the budget
// spent ends the delegation: no answer could be given within it.
func TestBudgetSpentBeforeQuestionFails(t *testing.T) {
	h := &askHandler{usage: executor.Usage{Prompt: 1, Completion: 50, Total: 51}}
	nodes := askMesh(t, h, nil)
	req, prov := nodes[0], nodes[1]
	d := delegateAndWait(t, req, Request{Profile: "ask", Peer: prov.id.PeerID(), Task: textTask("b"), BudgetTokens: 50})
	if d.State != protocol.StateFailed || !strings.Contains(d.Reason, "budget") {
		t.Fatalf("state %s %q", d.State, d.Reason)
	}
}

// TestWaitingSurvivesRestarts: a delegation waiting for input survives a
// restart of its provider and then of its requester (kill -9 for both), and
// the answer still completes it with a proof over both turns.
func TestWaitingSurvivesRestarts(t *testing.T) {
	h := &askHandler{}
	nodes := askMesh(t, h, nil)
	req, prov := nodes[0], nodes[1]
	ctx := context.Background()
	id := askAndWait(t, req, prov, "r")

	prov.crash()
	prov.start()
	pd, err := prov.st.DelegationInfo(store.RoleProvider, id)
	if err != nil || pd.State != protocol.StateInputRequired {
		t.Fatalf("provider after restart: %s %v", pd.State, err)
	}
	req.crash()
	req.start()
	waitState(t, req, id, protocol.StateInputRequired)
	if err := req.engine().Reply(ctx, id, textTask("Haskell")); err != nil {
		t.Fatalf("reply after restarts: %v", err)
	}
	d := waitState(t, req, id, protocol.StateCompleted)
	if got := Output(d); got != "asked which language for r? told Haskell" {
		t.Fatalf("output %q", got)
	}
	if p, err := req.engine().Verify(id); err != nil || p.Turns != 2 {
		t.Fatalf("verify: %+v %v", p, err)
	}
}

// TestReplyWhileProviderDown: an answer given while the provider is out of
// reach is kept, and delivered when the requester reattaches.
func TestReplyWhileProviderDown(t *testing.T) {
	h := &askHandler{}
	nodes := askMesh(t, h, nil)
	req, prov := nodes[0], nodes[1]
	ctx := context.Background()
	id := askAndWait(t, req, prov, "r")
	prov.stop()
	if err := req.engine().Reply(ctx, id, textTask("OCaml")); err != nil {
		t.Fatalf("reply while the provider is down: %v", err)
	}
	prov.start()
	d := waitState(t, req, id, protocol.StateCompleted)
	if got := Output(d); got != "asked which language for r? told OCaml" {
		t.Fatalf("output %q", got)
	}
	if _, err := req.engine().Verify(id); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

// TestWaitBoundedByDeadline: nobody answers, and the delegation expires at
// its deadline on both sides.
func TestWaitBoundedByDeadline(t *testing.T) {
	h := &askHandler{}
	nodes := askMesh(t, h, nil)
	req, prov := nodes[0], nodes[1]
	id, err := req.engine().Delegate(context.Background(), Request{Profile: "ask", Peer: prov.id.PeerID(), Task: textTask("r"), BudgetTokens: 500, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, req, id, protocol.StateInputRequired)
	d := waitState(t, req, id, protocol.StateExpired)
	if _, err := req.engine().Verify(id); err != nil {
		t.Fatalf("verify the expired result: %v (%s)", err, d.Reason)
	}
}

// TestWaitingHoldsNoVRAM: while a delegation waits for input its provider
// holds no lease: local work that needs the whole GPU runs without
// preempting it, and the answer takes the VRAM again for the next turn.
func TestWaitingHoldsNoVRAM(t *testing.T) {
	h := &askHandler{}
	nodes := newMesh(t, 2, func(i int, c *Config) {
		if i == 1 {
			c.Ledger = gpu.NewLedger(gpu.Static(8000), 0, nil)
			c.Profiles = append(c.Profiles,
				Profile{Profile: protocol.Profile{Name: "ask-gpu", MaxBudgetTokens: 1000, VRAMMiB: 6000}, Executor: executor.HandlerFunc(h.handle)},
				Profile{Profile: protocol.Profile{Name: "gpu-local", MaxBudgetTokens: 1000, VRAMMiB: 6000}, Executor: executor.Echo{}})
		}
	})
	req, prov := nodes[0], nodes[1]
	ctx := context.Background()
	id, err := req.engine().Delegate(ctx, Request{Profile: "ask-gpu", Peer: prov.id.PeerID(), Task: textTask("g"), BudgetTokens: 500})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, req, id, protocol.StateInputRequired)
	local := delegateAndWait(t, prov, Request{Profile: "gpu-local", Task: textTask("mine")})
	if local.State != protocol.StateCompleted {
		t.Fatalf("local work while a remote task waits: %s %s", local.State, local.Reason)
	}
	if d, _ := prov.st.DelegationInfo(store.RoleProvider, id); d.State != protocol.StateInputRequired {
		t.Fatalf("the waiting delegation is %s after the local work", d.State)
	}
	if err := req.engine().Reply(ctx, id, textTask("CUDA")); err != nil {
		t.Fatal(err)
	}
	d := waitState(t, req, id, protocol.StateCompleted)
	if got := Output(d); got != "asked which language for g? told CUDA" {
		t.Fatalf("output %q", got)
	}
}
