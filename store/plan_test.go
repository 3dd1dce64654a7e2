package store

import (
	"errors"
	"testing"

	"github.com/kithmesh/kith/protocol"
)

// A plan, its subtasks (with attempts) and its ledger survive a restart
// exactly as written; entries are numbered in order and never rewritten.
func TestPlanRoundTripAcrossRestart(t *testing.T) {
	s, dir := openTest(t, Options{})
	id := protocol.NewDelegationID()
	p := Plan{ID: id, Name: "notes", Spec: []byte(`{"subtasks":[]}`), State: "running"}
	subs := []PlanSubtask{{Plan: id, ID: "a", State: "pending"}, {Plan: id, ID: "b", State: "pending"}}
	if err := s.CreatePlan(p, subs); err != nil {
		t.Fatal(err)
	}
	if err := s.CreatePlan(p, nil); !errors.Is(err, ErrExists) {
		t.Fatalf("second CreatePlan: %v, want ErrExists", err)
	}
	prov := newPeerID(t)
	dlg := protocol.NewDelegationID()
	a := PlanSubtask{Plan: id, ID: "a", State: "done", Attempts: []PlanAttempt{
		{Marker: "kith-plan/x/a/1", Delegation: dlg, Peer: prov, State: "completed", Budget: 100, Used: 7},
	}}
	got, err := s.PutPlanSubtask(a, func([]PlanEntry) ([]PlanEntry, error) {
		return []PlanEntry{{Kind: "proposal", Slug: "use-go", Type: "architecture", Body: "Go", Subtask: "a", Delegation: dlg}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Seq != 1 {
		t.Fatalf("entries %+v, want one with seq 1", got)
	}
	if _, err := s.AppendPlanEntries(id, func(l []PlanEntry) ([]PlanEntry, error) {
		if len(l) != 1 {
			t.Errorf("check saw %d entries, want 1", len(l))
		}
		return []PlanEntry{{Kind: "decision", Slug: "use-go", Ref: 1, Origin: "cli"}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	// A refused check writes nothing.
	refuse := errors.New("refused")
	if _, err := s.AppendPlanEntries(id, func([]PlanEntry) ([]PlanEntry, error) { return nil, refuse }); !errors.Is(err, refuse) {
		t.Fatalf("refused append: %v", err)
	}
	if _, err := s.UpdatePlan(id, func(p *Plan) error { p.State = "completed"; p.Name = "changed"; return nil }); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, s, dir, Options{})
	gp, err := s.GetPlan(id)
	if err != nil {
		t.Fatal(err)
	}
	if gp.State != "completed" || gp.Name != "notes" || string(gp.Spec) != string(p.Spec) || gp.CreatedAt.IsZero() {
		t.Fatalf("plan after restart: %+v", gp)
	}
	st, err := s.PlanSubtasks(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 2 || st[0].ID != "a" || st[0].State != "done" || len(st[0].Attempts) != 1 {
		t.Fatalf("subtasks after restart: %+v", st)
	}
	if at := st[0].Attempts[0]; at.Delegation != dlg || at.Peer != prov || at.Used != 7 || at.Marker != "kith-plan/x/a/1" {
		t.Fatalf("attempt after restart: %+v", at)
	}
	l, err := s.PlanLedger(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 2 || l[0].Kind != "proposal" || l[1].Kind != "decision" || l[1].Ref != 1 || l[1].Seq != 2 {
		t.Fatalf("ledger after restart: %+v", l)
	}
	ps, err := s.ListPlans()
	if err != nil || len(ps) != 1 {
		t.Fatalf("ListPlans: %v %+v", err, ps)
	}
}

func TestPlanRefusals(t *testing.T) {
	s, _ := openTest(t, Options{})
	id := protocol.NewDelegationID()
	if _, err := s.PutPlanSubtask(PlanSubtask{Plan: id, ID: "a"}, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("subtask of a missing plan: %v", err)
	}
	if err := s.CreatePlan(Plan{ID: id}, []PlanSubtask{{ID: "a/b"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("subtask id with a slash: %v", err)
	}
	if _, err := s.GetPlan(id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused CreatePlan left a plan: %v", err)
	}
	if err := s.CreatePlan(Plan{}, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero id: %v", err)
	}
}

// A record written by a newer kith is refused, not guessed at.
func TestPlanNewerVersionRefused(t *testing.T) {
	s, _ := openTest(t, Options{})
	id := protocol.NewDelegationID()
	err := s.update(nil, func(txn *wtxn) error {
		return txn.Set(planKey(id), []byte(`{"v":2,"id":"`+id.String()+`","state":"running"}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPlan(id); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("GetPlan of a v2 record: %v, want ErrSchemaTooNew", err)
	}
}
