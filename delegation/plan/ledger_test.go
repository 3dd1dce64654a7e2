package plan

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/protocol"
)

// Proposals come in three shapes; malformed ones are dropped and said so.
func TestProposalsFromResult(t *testing.T) {
	parts := []protocol.Part{
		protocol.TextPart("prose\n```kith-decision\n{\"slug\": \"a\", \"body\": \"one\"}\n```\nmore\n```kith-decision\n[{\"slug\": \"b\", \"type\": \"scope\", \"body\": \"two\"}, {\"slug\": \"bad slug\", \"body\": \"x\"}]\n```"),
		protocol.DataPart([]byte(`{"kith_decisions": [{"slug": "c", "body": "three"}]}`)),
		protocol.DataPart([]byte(`{"other": 1}`)),
		protocol.FilePart(protocol.File{MediaType: DecisionMediaType, Bytes: []byte(`{"slug": "d", "type": "Learning", "body": "four"}`)}),
		protocol.FilePart(protocol.File{MediaType: DecisionMediaType, Bytes: []byte(`{not json`)}),
		protocol.FilePart(protocol.File{MediaType: "text/plain", Bytes: []byte(`{"slug": "e", "body": "ignored"}`)}),
	}
	ps, problems := Proposals(parts)
	var got []string
	for _, p := range ps {
		got = append(got, p.Slug+":"+p.Type+":"+p.Body)
	}
	want := "a:decision:one b:scope:two c:decision:three d:learning:four"
	if strings.Join(got, " ") != want {
		t.Errorf("proposals %v, want %s", got, want)
	}
	if len(problems) != 2 {
		t.Errorf("problems %q, want the bad slug and the bad JSON", problems)
	}
	if s := stripProposals(parts[0].Text); strings.Contains(s, "kith-decision") || !strings.Contains(s, "more") {
		t.Errorf("stripped: %q", s)
	}
	var many strings.Builder
	for range MaxProposals + 5 {
		many.WriteString("```kith-decision\n{\"slug\": \"x\", \"body\": \"y\"}\n```\n")
	}
	if ps, _ := Proposals([]protocol.Part{protocol.TextPart(many.String())}); len(ps) != MaxProposals {
		t.Errorf("%d proposals kept, want the cap %d", len(ps), MaxProposals)
	}
}

// The ledger's rules: the same slug twice is two entries; a merge appends
// a decision that links to its proposal; a proposal is settled once; a
// rejection needs a reason and is kept; nothing is ever rewritten.
func TestLedgerRules(t *testing.T) {
	w := newWorker("B")
	w.reply = func(text string) string {
		return "```kith-decision\n{\"slug\": \"cache\", \"body\": \"from " + key(text) + "\"}\n```"
	}
	m := newMesh(t, 2, func(i int) []delegation.Profile {
		if i == 1 {
			return []delegation.Profile{w.profile("work")}
		}
		return nil
	})
	a := m.nodes[0]
	c := a.coord()
	id, err := c.Start(context.Background(), parse(t, "p.json", `{"budget": 10, "subtasks": [
		{"id": "p1", "profile": "work", "task": "task: p1"},
		{"id": "p2", "profile": "work", "task": "task: p2", "after": ["p1"]},
		{"id": "p3", "profile": "work", "task": "task: p3", "after": ["p2"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if v := waitPlan(t, c, id); v.State != StateCompleted {
		t.Fatalf("plan %s: %s", v.State, v.Reason)
	}
	l, err := c.Ledger(id)
	if err != nil {
		t.Fatal(err)
	}
	var slugs []string
	for _, e := range l {
		slugs = append(slugs, e.Slug+"("+e.Subtask+")")
	}
	if strings.Join(slugs, " ") != "cache(p1) cache-2(p2) cache-3(p3)" {
		t.Fatalf("proposals %v", slugs)
	}
	if _, err := c.Merge(id, "cache", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Merge(id, "1", "test"); !errors.Is(err, ErrNotPending) {
		t.Fatalf("second merge: %v, want ErrNotPending", err)
	}
	if _, err := c.Reject(id, "cache-2", "  ", "test"); !errors.Is(err, ErrNeedsReason) {
		t.Fatalf("reject without reason: %v", err)
	}
	rej, err := c.Reject(id, "#2", "duplicates cache", "test")
	if err != nil || rej.Kind != KindRejection || rej.Ref != 2 || rej.Why != "duplicates cache" {
		t.Fatalf("reject: %+v %v", rej, err)
	}
	if _, err := c.Merge(id, "cache-2", "test"); !errors.Is(err, ErrNotPending) {
		t.Fatalf("merge of a rejected proposal: %v", err)
	}
	if _, err := c.Merge(id, "4", "test"); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("merge of a decision: %v, want ErrNoEntry", err)
	}
	if _, err := c.Merge(id, "ghost", "test"); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("merge of a missing slug: %v", err)
	}
	if _, err := c.Merge(protocol.NewDelegationID(), "cache", "test"); !errors.Is(err, ErrUnknownPlan) {
		t.Fatalf("merge in a missing plan: %v", err)
	}
	after, err := c.Ledger(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 5 {
		t.Fatalf("ledger has %d entries, want 3 proposals, a decision, a rejection", len(after))
	}
	for i := range l {
		if after[i].PlanEntry != l[i].PlanEntry {
			t.Errorf("entry %d was rewritten: %+v → %+v", i+1, l[i].PlanEntry, after[i].PlanEntry)
		}
	}
	st := map[string]Status{}
	for _, e := range after {
		if e.Kind == KindProposal {
			st[e.Slug] = e.Status
		}
	}
	if st["cache"] != Merged || st["cache-2"] != Rejected || st["cache-3"] != Pending {
		t.Fatalf("statuses %v", st)
	}
	// The ledger is durable: it reads the same from the store.
	raw, err := a.store().PlanLedger(id)
	if err != nil || len(raw) != 5 || raw[3].Kind != KindDecision || raw[3].Ref != 1 || raw[4].Origin != "test" {
		t.Fatalf("stored ledger %+v %v", raw, err)
	}
}

func FuzzProposals(f *testing.F) {
	f.Add([]byte("```kith-decision\n{\"slug\": \"a\", \"body\": \"b\"}\n```"), []byte(`{"kith_decisions": [{"slug": "c", "body": "d"}]}`))
	f.Add([]byte("```kith-decision\n[{\"slug\": \"\"}]\n```"), []byte(`{"kith_decisions": 5}`))
	f.Fuzz(func(t *testing.T, text, data []byte) {
		parts := []protocol.Part{
			protocol.TextPart(string(text)),
			protocol.DataPart(data),
			protocol.FilePart(protocol.File{MediaType: DecisionMediaType, Bytes: data}),
		}
		ps, _ := Proposals(parts)
		if len(ps) > MaxProposals {
			t.Fatalf("%d proposals", len(ps))
		}
		for _, p := range ps {
			if p.check() != nil {
				t.Fatalf("kept an invalid proposal %+v", p)
			}
		}
		_ = stripProposals(string(text))
	})
}

func FuzzParse(f *testing.F) {
	f.Add("p.toml", []byte(fivePlan))
	f.Add("p.json", []byte(`{"budget": 10, "subtasks": [{"id": "a", "profile": "w", "task": "t", "after": ["a"]}]}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		s, err := Parse(name, data)
		if err != nil {
			return
		}
		if s.Validate() != nil {
			return
		}
		if len(order(s.Subtasks)) != len(s.Subtasks) {
			t.Fatal("a valid plan that does not order")
		}
		var sum uint64
		for _, st := range s.steps() {
			sum += st.Budget
		}
		if sum > s.Budget {
			t.Fatalf("steps get %d of a %d budget", sum, s.Budget)
		}
	})
}
