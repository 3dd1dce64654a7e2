package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/node/api"
)

// The plan routes over the real socket: a check starts nothing, a bad plan
// is refused with its rule, a plan runs to the end, its step's proposal
// lands pending in the ledger and is merged (once) through the API.
func TestPlansOverAPI(t *testing.T) {
	n, cancel, done := startNode(t)
	defer func() { cancel(); <-done }()
	c := api.NewClient(n.SocketPath())
	defer c.Close()
	ctx, cctx := context.WithTimeout(context.Background(), 30*time.Second)
	defer cctx()

	const good = `
name = "api"
budget = 400
[[subtasks]]
id = "s1"
profile = "echo"
task = """found it
` + "```kith-decision" + `
{"slug": "use-echo", "body": "echo is enough"}
` + "```" + `
"""
[[subtasks]]
id = "s2"
profile = "echo"
after = ["s1"]
task = "after {{outputs.s1}}"
`
	chk, err := c.CheckPlan(ctx, "p.toml", good)
	if err != nil {
		t.Fatal(err)
	}
	if chk.State != "checked" || chk.ID != "" || len(chk.Steps) != 2 || chk.Steps[0].Budget != 200 {
		t.Fatalf("check: %+v", chk)
	}
	if ps, err := c.Plans(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("a check recorded a plan: %v %+v", err, ps)
	}
	_, err = c.RunPlan(ctx, "p.json", `{"budget": 1, "subtasks": [{"id": "a", "profile": "echo", "task": "t", "after": ["a"]}]}`)
	if err == nil || !strings.Contains(err.Error(), "cycle: a → a") {
		t.Fatalf("cyclic plan: %v", err)
	}
	p, err := c.RunPlan(ctx, "p.toml", good)
	if err != nil {
		t.Fatal(err)
	}
	for p.State == "running" {
		select {
		case <-ctx.Done():
			t.Fatalf("plan never ended: %+v", p)
		case <-time.After(20 * time.Millisecond):
		}
		if p, err = c.Plan(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	if p.State != "completed" || len(p.Steps) != 2 || p.Steps[1].State != "done" || !p.Steps[1].Attempts[0].Local {
		t.Fatalf("plan: %+v", p)
	}
	if !strings.Contains(p.Output, "after found it") || strings.Contains(p.Output, "kith-decision") {
		t.Fatalf("output %q", p.Output)
	}
	l, err := c.Decisions(ctx, p.ID)
	if err != nil || len(l) != 1 || l[0].Status != "pending" || l[0].Slug != "use-echo" || l[0].Subtask != "s1" {
		t.Fatalf("ledger %+v %v", l, err)
	}
	d, err := c.MergeDecision(ctx, p.ID, api.LedgerAction{Ref: "use-echo", Origin: "test"})
	if err != nil || d.Kind != "decision" || d.Ref != l[0].Seq {
		t.Fatalf("merge: %+v %v", d, err)
	}
	if _, err := c.MergeDecision(ctx, p.ID, api.LedgerAction{Ref: "use-echo"}); err == nil || !strings.Contains(err.Error(), "no longer pending") {
		t.Fatalf("second merge: %v", err)
	}
	if _, err := c.RejectDecision(ctx, p.ID, api.LedgerAction{Ref: "ghost", Why: "no"}); err == nil || !strings.Contains(err.Error(), "no proposal") {
		t.Fatalf("reject of a missing proposal: %v", err)
	}
	if err := c.CancelPlan(ctx, p.ID, ""); err == nil || !strings.Contains(err.Error(), "already ended") {
		t.Fatalf("cancel of a finished plan: %v", err)
	}
	// The tree shows the plan as the parent of its subtasks' delegations.
	tree, err := c.Tree(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pn *api.TreeNode
	for i := range tree {
		if tree[i].ID == p.ID {
			pn = &tree[i]
		}
	}
	if pn == nil || pn.Profile != "plan api" || pn.State != api.StateCompleted || len(pn.Children) != 2 {
		t.Fatalf("tree: no plan node with its two delegations: %+v", tree)
	}
	ps, err := c.Plans(ctx)
	if err != nil || len(ps) != 1 || ps[0].ID != p.ID || ps[0].State != "completed" {
		t.Fatalf("plans: %+v %v", ps, err)
	}
}
