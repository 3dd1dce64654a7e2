package plan

import (
	"context"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// fivePlan: two parallel branches (x1 → x2 on "left", y1 on "right"), a
// join of both, and an assemble step.
const fivePlan = `
name = "five"
budget = 5000

[[subtasks]]
id = "x1"
profile = "left"
task = "task: x1"

[[subtasks]]
id = "x2"
profile = "left"
after = ["x1"]
task = "refine {{outputs.x1}}\ntask: x2"

[[subtasks]]
id = "y1"
profile = "right"
task = "task: y1"

[[subtasks]]
id = "join"
profile = "join"
after = ["x2", "y1"]
task = "join {{outputs.x2}} and {{outputs.y1}}\ntask: join"

[assemble]
profile = "assemble"
task = "assemble the fragments"
`

// A three-node mesh runs a five-step plan: the branches land on different
// peers, a proposal from one branch is merged while the other still runs
// and reaches the join (before its task text), and the assemble step gets
// every fragment in dependency order. Every step runs once.
func TestPlanAcrossThreeNodes(t *testing.T) {
	wa, wb, wc := newWorker("A"), newWorker("B"), newWorker("C")
	wc.reply = func(text string) string {
		if key(text) == "y1" {
			return "[C] y1\n```kith-decision\n{\"slug\": \"Use-Go\", \"type\": \"architecture\", \"body\": \"write it in Go\"}\n```\n"
		}
		return "[C] " + key(text)
	}
	m := newMesh(t, 3, func(i int) []delegation.Profile {
		switch i {
		case 0:
			return []delegation.Profile{wa.profile("assemble")}
		case 1:
			return []delegation.Profile{wb.profile("left"), wb.profile("join")}
		default:
			return []delegation.Profile{wc.profile("right")}
		}
	})
	a, b, c := m.nodes[0], m.nodes[1], m.nodes[2]
	wb.blockOn("x2") // the left branch waits until the proposal is merged

	ctx := context.Background()
	id, err := a.coord().Start(ctx, parse(t, "five.toml", fivePlan))
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, wb, "x2")
	var prop Entry
	waitFor(t, "y1's proposal", func() bool {
		l, err := a.coord().Ledger(id)
		if err != nil || len(l) == 0 {
			return false
		}
		prop = l[0]
		return true
	})
	if prop.Kind != KindProposal || prop.Status != Pending || prop.Slug != "use-go" || prop.Subtask != "y1" {
		t.Fatalf("proposal %+v", prop)
	}
	dec, err := a.coord().Merge(id, "use-go", "test")
	if err != nil {
		t.Fatal(err)
	}
	if dec.Kind != KindDecision || dec.Ref != prop.Seq || dec.Body != "write it in Go" {
		t.Fatalf("decision %+v", dec)
	}
	wb.release("x2")

	v := waitPlan(t, a.coord(), id)
	if v.State != StateCompleted {
		t.Fatalf("plan %s: %s", v.State, v.Reason)
	}
	want := map[string]peer.ID{"x1": b.host.ID(), "x2": b.host.ID(), "y1": c.host.ID(), "join": b.host.ID()}
	for sid, p := range want {
		s := step(v, sid)
		if s.State != SubDone || len(s.Attempts) != 1 || s.Attempts[0].Peer != p {
			t.Errorf("step %s: %+v, want done on %s in one attempt", sid, s, p)
		}
	}
	if s := step(v, AssembleID); s.State != SubDone || !s.Attempts[0].Local {
		t.Errorf("assemble: %+v, want done here", s)
	}
	for _, k := range []string{"x1", "x2", "join"} {
		if n := wb.count(k); n != 1 {
			t.Errorf("B ran %s %d times", k, n)
		}
	}
	if n := wc.count("y1"); n != 1 {
		t.Errorf("C ran y1 %d times", n)
	}
	// The join got the merged decision before its text, and both outputs.
	var join string
	for _, tx := range wb.seen() {
		if key(tx) == "join" {
			join = tx
		}
	}
	if !strings.HasPrefix(join, "Decisions in force") || !strings.Contains(join, "use-go (architecture): write it in Go") {
		t.Errorf("join's task does not start with the decision:\n%s", join)
	}
	if !strings.Contains(join, "join [B] x2 and [C] y1") || strings.Contains(join, "kith-decision") {
		t.Errorf("join's task misses the outputs or carries the proposal block:\n%s", join)
	}
	// x1, which ran before the merge, got no decisions.
	for _, tx := range wb.seen() {
		if key(tx) == "x1" && strings.Contains(tx, "Decisions") {
			t.Errorf("x1 ran before the merge but got decisions:\n%s", tx)
		}
	}
	asm := wa.seen()
	if len(asm) != 1 {
		t.Fatalf("assemble ran %d times", len(asm))
	}
	order := []string{"fragment x1", "fragment x2", "fragment y1", "fragment join"}
	at := 0
	for _, f := range order {
		i := strings.Index(asm[0][at:], f)
		if i < 0 {
			t.Fatalf("assemble's task lacks %q in dependency order:\n%s", f, asm[0])
		}
		at += i
	}
	if v.Output == "" || v.Used == 0 || v.Used > v.Budget {
		t.Errorf("output %q, used %d of %d", v.Output, v.Used, v.Budget)
	}
	// Every delegation is a child of the plan's root.
	for _, s := range v.Steps {
		d, err := a.eng.Get(s.Attempts[0].Delegation)
		if err != nil || d.Parent != id {
			t.Errorf("step %s: delegation parent %s, want %s (%v)", s.ID, d.Parent, id, err)
		}
	}
	// The ledger is append-only: proposal, then the decision that names it.
	l, _ := a.coord().Ledger(id)
	if len(l) != 2 || l[0].Status != Merged || l[0].SettledBy != l[1].Seq || l[1].Ref != l[0].Seq {
		t.Errorf("ledger %+v", l)
	}
}

// A provider that fails a subtask: the retry goes to another provider (the
// one that failed is excluded), and the plan completes.
func TestPlanReoffersFailedSubtask(t *testing.T) {
	wb, wc := newWorker("B"), newWorker("C")
	wb.fail = true
	m := newMesh(t, 3, func(i int) []delegation.Profile {
		switch i {
		case 1:
			return []delegation.Profile{wb.profile("work")}
		case 2:
			return []delegation.Profile{wc.profile("work")}
		}
		return nil
	})
	a, b, c := m.nodes[0], m.nodes[1], m.nodes[2]
	// B is trusted more, so it is chosen first.
	if err := a.store().SetTrust(b.host.ID(), protocol.Trusted, "test"); err != nil {
		t.Fatal(err)
	}
	id, err := a.coord().Start(context.Background(), parse(t, "p.json",
		`{"budget": 1000, "retry": {"attempts": 3}, "subtasks": [{"id": "w", "profile": "work", "task": "task: w"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	v := waitPlan(t, a.coord(), id)
	if v.State != StateCompleted {
		t.Fatalf("plan %s: %s", v.State, v.Reason)
	}
	s := step(v, "w")
	if len(s.Attempts) != 2 || s.Attempts[0].Peer != b.host.ID() || s.Attempts[0].State != "failed" ||
		s.Attempts[1].Peer != c.host.ID() || s.Attempts[1].State != "completed" {
		t.Fatalf("attempts %+v, want failed on B then completed on C", s.Attempts)
	}
	if wb.count("w") != 1 || wc.count("w") != 1 {
		t.Fatalf("runs: B %d, C %d", wb.count("w"), wc.count("w"))
	}
}

// When every provider has failed the subtask, the plan fails with the
// reason, and nothing after it runs.
func TestPlanFailsWhenNoProviderLeft(t *testing.T) {
	wb := newWorker("B")
	wb.fail = true
	m := newMesh(t, 2, func(i int) []delegation.Profile {
		if i == 1 {
			return []delegation.Profile{wb.profile("work")}
		}
		return []delegation.Profile{newWorker("A").profile("after")}
	})
	a := m.nodes[0]
	id, err := a.coord().Start(context.Background(), parse(t, "p.toml", `
budget = 100
[retry]
attempts = 3
[[subtasks]]
id = "w"
profile = "work"
task = "task: w"
[[subtasks]]
id = "next"
profile = "after"
after = ["w"]
task = "task: next"
`))
	if err != nil {
		t.Fatal(err)
	}
	v := waitPlan(t, a.coord(), id)
	if v.State != StateFailed || !strings.Contains(v.Reason, "subtask w failed") || !strings.Contains(v.Reason, "not failed it") {
		t.Fatalf("plan %s: %s", v.State, v.Reason)
	}
	if s := step(v, "next"); s.State != SubSkipped || len(s.Attempts) != 0 {
		t.Fatalf("next: %+v", s)
	}
	if wb.count("w") != 1 {
		t.Fatalf("B ran w %d times, want 1 (the retry must not go back to it)", wb.count("w"))
	}
}

// The coordinator dies mid-plan (one subtask done, one running on a peer,
// one not yet dispatched) and starts again on the same store: the plan
// completes with no subtask run twice. The running subtask's attempt is
// rewritten as it would be had the crash come between recording the
// attempt and recording its delegation ID: the restarted coordinator finds
// that delegation by its marker instead of making another.
func TestPlanResumesAfterRestart(t *testing.T) {
	wb := newWorker("B")
	m := newMesh(t, 2, func(i int) []delegation.Profile {
		if i == 1 {
			return []delegation.Profile{wb.profile("work")}
		}
		return nil
	})
	a := m.nodes[0]
	wb.blockOn("s2")
	id, err := a.coord().Start(context.Background(), parse(t, "p.toml", `
budget = 300
[[subtasks]]
id = "s1"
profile = "work"
task = "task: s1"
[[subtasks]]
id = "s2"
profile = "work"
after = ["s1"]
task = "task: s2"
[[subtasks]]
id = "s3"
profile = "work"
after = ["s2"]
task = "{{outputs.s1}} {{outputs.s2}}\ntask: s3"
`))
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, wb, "s2")
	waitFor(t, "s2 recorded as running", func() bool {
		v, err := a.coord().Get(id)
		return err == nil && step(v, "s2").State == SubRunning
	})
	a.stop()

	// Forget s2's delegation ID, as a crash right after Delegate would.
	st, err := store.Open(a.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	subs, err := st.PlanSubtasks(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if s.ID == "s2" {
			s.State = SubDispatching
			s.Attempts[0].Delegation = protocol.DelegationID{}
			s.Attempts[0].State = attemptDispatching
			if _, err := st.PutPlanSubtask(s, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	a.start()
	wb.release("s2")
	v := waitPlan(t, a.coord(), id)
	if v.State != StateCompleted {
		t.Fatalf("plan %s: %s", v.State, v.Reason)
	}
	for _, k := range []string{"s1", "s2", "s3"} {
		if n := wb.count(k); n != 1 {
			t.Errorf("%s ran %d times, want once", k, n)
		}
		if s := step(v, k); len(s.Attempts) != 1 || s.Attempts[0].Delegation.IsZero() {
			t.Errorf("%s attempts %+v", k, s.Attempts)
		}
	}
}

// Cancel ends a running plan: the delegation out is cancelled, what had
// not started is skipped, and the plan cannot be cancelled twice.
func TestPlanCancel(t *testing.T) {
	wb := newWorker("B")
	m := newMesh(t, 2, func(i int) []delegation.Profile {
		if i == 1 {
			return []delegation.Profile{wb.profile("work")}
		}
		return nil
	})
	a := m.nodes[0]
	wb.blockOn("c1")
	id, err := a.coord().Start(context.Background(), parse(t, "p.json",
		`{"budget": 10, "subtasks": [{"id": "c1", "profile": "work", "task": "task: c1"}, {"id": "c2", "profile": "work", "after": ["c1"], "task": "task: c2"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, wb, "c1")
	if err := a.coord().Cancel(id, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	v, err := a.coord().Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != StateCancelled || v.Reason != "changed my mind" || step(v, "c1").State != SubCancelled || step(v, "c2").State != SubSkipped {
		t.Fatalf("after cancel: %s %q c1=%s c2=%s", v.State, v.Reason, step(v, "c1").State, step(v, "c2").State)
	}
	d, err := a.eng.Get(step(v, "c1").Attempts[0].Delegation)
	if err != nil || d.State != protocol.StateCancelled {
		t.Fatalf("c1's delegation: %s %v", d.State, err)
	}
	if err := a.coord().Cancel(id, ""); err == nil {
		t.Fatal("a second cancel succeeded")
	}
}

// A step's constraints: peer pins it to one provider even when another is
// trusted more; min_trust keeps it from providers trusted less, and with
// none left the plan fails saying so, having run nothing.
func TestPlanStepConstraints(t *testing.T) {
	wb, wc := newWorker("B"), newWorker("C")
	m := newMesh(t, 3, func(i int) []delegation.Profile {
		switch i {
		case 1:
			return []delegation.Profile{wb.profile("work")}
		case 2:
			return []delegation.Profile{wc.profile("work")}
		}
		return nil
	})
	a, b, c := m.nodes[0], m.nodes[1], m.nodes[2]
	if err := a.store().SetTrust(b.host.ID(), protocol.Trusted, "test"); err != nil {
		t.Fatal(err)
	}
	id, err := a.coord().Start(context.Background(), parse(t, "p.json", `{"budget": 100, "subtasks": [
		{"id": "pinned", "profile": "work", "task": "task: pinned", "peer": "`+c.host.ID().String()+`"},
		{"id": "picky", "profile": "work", "task": "task: picky", "min_trust": "trusted"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	v := waitPlan(t, a.coord(), id)
	if v.State != StateCompleted || step(v, "pinned").Attempts[0].Peer != c.host.ID() || step(v, "picky").Attempts[0].Peer != b.host.ID() {
		t.Fatalf("plan %s (%s): pinned on %s, picky on %s", v.State, v.Reason, step(v, "pinned").Attempts[0].Peer, step(v, "picky").Attempts[0].Peer)
	}
	if err := a.store().SetTrust(b.host.ID(), protocol.Verified, "test"); err != nil {
		t.Fatal(err)
	}
	id, err = a.coord().Start(context.Background(), parse(t, "p.json",
		`{"budget": 100, "subtasks": [{"id": "none", "profile": "work", "task": "task: none", "min_trust": "trusted"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	v = waitPlan(t, a.coord(), id)
	if v.State != StateFailed || !strings.Contains(v.Reason, "min_trust trusted") {
		t.Fatalf("plan %s: %s", v.State, v.Reason)
	}
	if wb.count("none") != 0 || wc.count("none") != 0 {
		t.Fatal("a step no provider may run ran")
	}
}

// A running plan whose stored records make no plan is marked failed at
// resume, with the reason, instead of staying running forever.
func TestPlanUnreadableAtResumeFails(t *testing.T) {
	m := newMesh(t, 1, func(int) []delegation.Profile { return nil })
	a := m.nodes[0]
	a.stop()
	st, err := store.Open(a.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	id := protocol.NewDelegationID()
	if err := st.CreatePlan(store.Plan{ID: id, Spec: []byte(`{"budget": 0}`), State: StateRunning}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	a.start()
	v := waitPlan(t, a.coord(), id)
	if v.State != StateFailed || !strings.Contains(v.Reason, "cannot resume") {
		t.Fatalf("plan %s: %s", v.State, v.Reason)
	}
}
