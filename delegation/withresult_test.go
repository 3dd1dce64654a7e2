package delegation

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// A provider that answered its last offer for a profile fast has its next
// offer's record written with the answer: one write on the requester, not
// two (Delegate, createWithResult).

// records collects the records a requester writes as it creates them.
type records struct {
	mu   sync.Mutex
	seen []store.Delegation
	fail func(store.Delegation) error // when set, fails the writes it returns an error for
}

func (r *records) hook(d store.Delegation) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, d)
	if r.fail != nil {
		return r.fail(d)
	}
	return nil
}

// of returns the records written for id.
func (r *records) of(id protocol.DelegationID) []store.Delegation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Delegation
	for _, d := range r.seen {
		if d.ID == id {
			out = append(out, d)
		}
	}
	return out
}

// fastMesh starts a requester a and a provider b, and runs one delegation
// of profile from a to b, so that a has seen b answer it fast. createDelay
// is stretched so that the answer comes within it whatever the machine's
// load. The first delegation's record is written alone: a knew nothing of
// b before it.
func fastMesh(t *testing.T, profile string, register func(b *testNode)) (ctx context.Context, a, b *testNode, rec *records, logs *lockedBuffer, first protocol.DelegationID) {
	ctx, a, b, _, _, logs = createdMesh(t)
	if register != nil {
		register(b)
	}
	rec = &records{}
	a.engine().SetBeforeCreate(rec.hook)
	a.engine().SetCreateDelay(time.Minute)
	first, err := a.engine().Delegate(ctx, Request{Profile: profile, Peer: b.id.PeerID(), Task: textTask("first"), BudgetTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := a.engine().Wait(ctx, first); err != nil || d.State != protocol.StateCompleted {
		t.Fatalf("first delegation: %s (%s), %v", d.State, d.Reason, err)
	}
	if w := rec.of(first); len(w) != 1 || w[0].State != protocol.StateOffered {
		t.Fatalf("the first delegation's record was written as %v, want once, alone", states(w))
	}
	if !a.engine().answersFast(b.id.PeerID(), profile) {
		t.Fatal("a provider that answered within createDelay is not noted as fast")
	}
	return ctx, a, b, rec, logs, first
}

func states(ds []store.Delegation) []protocol.State {
	var out []protocol.State
	for _, d := range ds {
		out = append(out, d.State)
	}
	return out
}

// TestResultWithRecord: a fast provider's next result is written with the
// record, once; the record, its log and what Wait returns are those of a
// delegation whose record and result were written apart, and its proof
// checks out against what is stored.
func TestResultWithRecord(t *testing.T) {
	ctx, a, b, rec, _, first := fastMesh(t, "echo", nil)
	id, err := a.engine().Delegate(ctx, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("together"), BudgetTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	w := rec.of(id)
	if len(w) != 1 || w[0].State != protocol.StateCompleted {
		t.Fatalf("the record was written as %v, want once, with its result", states(w))
	}
	kept := func() bool {
		a.engine().subsMu.Lock()
		defer a.engine().subsMu.Unlock()
		_, ok := a.engine().finals[id]
		return ok
	}
	if !kept() {
		t.Fatal("Delegate returned before the record written with its result was kept for Wait")
	}
	got, err := a.engine().Wait(ctx, id)
	if err != nil || got.State != protocol.StateCompleted || Output(got) != "together" {
		t.Fatalf("wait: %s %q (%s), %v", got.State, Output(got), got.Reason, err)
	}
	stored, err := a.st.DelegationResult(store.RoleRequester, id)
	if err != nil {
		t.Fatal(err)
	}
	sameDelegation(t, "Wait's record", got, stored)
	if kept() {
		t.Fatal("Wait left the record it took kept")
	}
	again, err := a.engine().Wait(ctx, id) // read back now
	if err != nil {
		t.Fatal(err)
	}
	sameDelegation(t, "a second Wait's record", again, stored)

	// The log: that of the first delegation, written in two.
	logTypes := func(id protocol.DelegationID) []string {
		evs, err := a.st.Events(store.RoleRequester, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, ev := range evs {
			if ev.Seq != uint64(i+1) {
				t.Fatalf("event %d of %s numbered %d", i, id, ev.Seq)
			}
			out = append(out, ev.Type+"/"+ev.State.String())
		}
		return out
	}
	if one, two := logTypes(id), logTypes(first); strings.Join(one, " ") != strings.Join(two, " ") {
		t.Fatalf("the log written with the record: %v, written apart: %v", one, two)
	}
	if stored.LastSeq != uint64(len(logTypes(id))) {
		t.Fatalf("LastSeq %d for a log of %d", stored.LastSeq, len(logTypes(id)))
	}
	if _, err := a.engine().Verify(id); err != nil {
		t.Fatalf("the stored proof: %v", err)
	}
	plain, err := a.st.DelegationInfo(store.RoleRequester, first)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Usage != plain.Usage || stored.Reason != plain.Reason || stored.Remote != plain.Remote {
		t.Fatalf("the record written with its result: %+v, written apart: %+v", stored, plain)
	}
}

// sameDelegation fails t unless got and want are the same record (their
// times to the nanosecond, as stored).
func sameDelegation(t *testing.T, what string, got, want store.Delegation) {
	t.Helper()
	times := func(d store.Delegation) [3]time.Time { return [3]time.Time{d.CreatedAt, d.UpdatedAt, d.Deadline} }
	gt, wt := times(got), times(want)
	for i := range gt {
		if !gt[i].Equal(wt[i]) {
			t.Fatalf("%s: times %v, stored %v", what, gt, wt)
		}
	}
	got.CreatedAt, got.UpdatedAt, got.Deadline = want.CreatedAt, want.UpdatedAt, want.Deadline
	if got.ID != want.ID || got.Role != want.Role || got.Peer != want.Peer || got.Remote != want.Remote ||
		got.Parent != want.Parent || got.ContextID != want.ContextID || got.Profile != want.Profile ||
		got.State != want.State || got.Reason != want.Reason || got.BudgetTokens != want.BudgetTokens ||
		got.Usage != want.Usage || string(got.Result) != string(want.Result) || got.Offer != nil || got.LastSeq != want.LastSeq {
		t.Fatalf("%s:\n%+v\nstored:\n%+v", what, got, want)
	}
}

// TestResultWithRecordFails: when the write of the record with its result
// fails, Delegate reports it, the follower ends, and nothing is stored.
func TestResultWithRecordFails(t *testing.T) {
	ctx, a, b, rec, logs, _ := fastMesh(t, "echo", nil)
	full := errors.New("no space left on device")
	rec.mu.Lock()
	rec.fail = func(d store.Delegation) error {
		if d.State.Terminal() {
			return full
		}
		return nil
	}
	rec.mu.Unlock()
	_, err := a.engine().Delegate(ctx, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("lost"), BudgetTokens: 100})
	if !errors.Is(err, full) {
		t.Fatalf("Delegate: %v, want the write's error", err)
	}
	rec.mu.Lock()
	last := rec.seen[len(rec.seen)-1]
	rec.mu.Unlock()
	if last.State != protocol.StateCompleted {
		t.Fatalf("the failed write was of a %s record, want one with its result", last.State)
	}
	neverStored(t, ctx, a, last.ID, logs)
}

// TestSlowAnswerWritesRecord: when a provider that answered fast before
// takes longer than createDelay, the record is written alone and Delegate
// returns while the task runs; the provider is no longer taken as fast.
func TestSlowAnswerWritesRecord(t *testing.T) {
	var block atomic.Bool
	gate := make(chan struct{})
	register := func(b *testNode) {
		err := b.engine().Register("gated", func(ctx context.Context, task executor.Task, _ func(executor.Update)) (executor.Result, error) {
			if block.Load() {
				select {
				case <-gate:
				case <-ctx.Done():
					return executor.Result{}, context.Cause(ctx)
				}
			}
			return executor.Result{Text: task.Text, Usage: executor.Usage{Prompt: 1, Completion: 1, Total: 2}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, a, b, rec, _, _ := fastMesh(t, "gated", register)
	a.engine().SetCreateDelay(20 * time.Millisecond)
	block.Store(true)
	id, err := a.engine().Delegate(ctx, Request{Profile: "gated", Peer: b.id.PeerID(), Task: textTask("slow"), BudgetTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if w := rec.of(id); len(w) != 1 || w[0].State.Terminal() {
		t.Fatalf("the record was written as %v, want once, alone", states(w))
	}
	if d, err := a.st.DelegationInfo(store.RoleRequester, id); err != nil || d.State.Terminal() {
		t.Fatalf("the record once Delegate returned: %s, %v; want it stored, the task still running", d.State, err)
	}
	close(gate)
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateCompleted || Output(d) != "slow" {
		t.Fatalf("wait: %s %q (%s), %v", d.State, Output(d), d.Reason, err)
	}
	if a.engine().answersFast(b.id.PeerID(), "gated") {
		t.Fatal("a provider that answered after createDelay is still taken as fast")
	}
}

// TestNoHoldBackWithoutSync: on a store that does not sync, the record is
// written at once, alone, even for a provider that answers fast: holding
// it back would save no wait for the disk.
func TestNoHoldBackWithoutSync(t *testing.T) {
	mem, err := store.OpenInMemory(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mem.Close() })
	nodes := newMesh(t, 2, func(i int, c *Config) {
		if i == 0 {
			c.Store = mem
		}
	})
	a, b := nodes[0], nodes[1]
	rec := &records{}
	a.engine().SetBeforeCreate(rec.hook)
	a.engine().SetCreateDelay(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 2 {
		id, err := a.engine().Delegate(ctx, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("m"), BudgetTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := a.engine().Wait(ctx, id); err != nil || d.State != protocol.StateCompleted {
			t.Fatalf("delegation %d: %s (%s), %v", i, d.State, d.Reason, err)
		}
		if w := rec.of(id); len(w) != 1 || w[0].State != protocol.StateOffered {
			t.Fatalf("delegation %d's record was written as %v, want once, alone", i, states(w))
		}
	}
	if !a.engine().answersFast(b.id.PeerID(), "echo") {
		t.Fatal("the provider answered fast, and is not noted so: the test shows nothing")
	}
}

// TestFinalsBounded: the records kept for Wait hold at most maxFinals
// records and maxFinalBytes of results together, however many delegations
// end without a caller waiting; a result over maxFinalResult is not kept;
// a record is handed over once, and what it held is counted out.
func TestFinalsBounded(t *testing.T) {
	e := newMesh(t, 1, nil)[0].engine()
	keep := func(n int) protocol.DelegationID {
		id := protocol.NewDelegationID()
		e.keepFinal(&store.Delegation{ID: id, State: protocol.StateCompleted, Result: make([]byte, n)})
		return id
	}
	check := func(when string) {
		t.Helper()
		e.subsMu.Lock()
		defer e.subsMu.Unlock()
		held := 0
		for _, d := range e.finals {
			held += len(d.Result)
		}
		if held != e.finalBytes || held > maxFinalBytes || len(e.finals) > maxFinals {
			t.Fatalf("%s: %d records holding %d bytes, counted %d; want at most %d holding %d", when, len(e.finals), held, e.finalBytes, maxFinals, maxFinalBytes)
		}
	}
	var big []protocol.DelegationID
	for range 2 * maxFinalBytes / maxFinalResult {
		big = append(big, keep(maxFinalResult))
		check("results of maxFinalResult")
	}
	if d := e.takeFinal(big[len(big)-1]); d == nil || len(d.Result) != maxFinalResult {
		t.Fatal("the latest record kept was not handed over")
	}
	if e.takeFinal(big[len(big)-1]) != nil {
		t.Fatal("a record was handed over twice")
	}
	check("after a take")
	if e.takeFinal(keep(maxFinalResult+1)) != nil {
		t.Fatal("a result over maxFinalResult was kept")
	}
	for range 2 * maxFinals {
		keep(10)
		check("small results")
	}
	e.subsMu.Lock()
	n := len(e.finals)
	e.subsMu.Unlock()
	if n != maxFinals {
		t.Fatalf("%d small records kept, want %d, the cap", n, maxFinals)
	}
}
