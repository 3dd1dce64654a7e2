package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/node/api"
)

// planWorker is an exec profile's command for the plan tests: it appends
// the task's last line (the plans below end every task with "task: ID") to
// a runs file, waits for the gate when the task says "[gated]", then
// echoes the task.
func planWorker(t *testing.T, runs, gate string) []string {
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o600) })
	return []string{"sh", "-c", `in=$(cat); printf '%s\n' "$in" | tail -n 1 >> "$1"
case "$in" in *"[gated]"*) i=0; while [ ! -e "$2" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done;; esac
printf '%s' "$in"`, "sh", runs, gate}
}

func runsOf(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out[strings.TrimPrefix(l, "task: ")]++
		}
	}
	return out
}

func (n *testNode) plan(id string) api.Plan {
	n.t.Helper()
	r := n.kith("plan", "show", "--json", id)
	r.mustSucceed(n.t)
	var p api.Plan
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		n.t.Fatalf("plan show --json: %v\n%s", err, r.stdout)
	}
	return p
}

func (n *testNode) waitPlan(id, what string, done func(api.Plan) bool) api.Plan {
	n.t.Helper()
	deadline := time.Now().Add(stateWait)
	for {
		p := n.plan(id)
		if done(p) {
			return p
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("plan %s: %s never happened; last:\n%s", id, what, n.kith("plan", "show", id).stdout)
		}
		time.Sleep(pollEvery)
	}
}

func planStep(p api.Plan, id string) api.PlanStep {
	for _, s := range p.Steps {
		if s.ID == id {
			return s
		}
	}
	return api.PlanStep{}
}

// TestE2EPlan: three real daemons run a five-step plan (two branches, a
// join, an assemble step). A proposal from the first branch is merged from
// the CLI and reaches the join; the provider running the other branch is
// killed (SIGKILL) mid-task and that subtask is re-offered to the third
// node; then the coordinator itself is killed mid-plan and restarted. The
// plan completes, and no subtask ran twice anywhere.
func TestE2EPlan(t *testing.T) {
	dir := testDir(t)
	runsB, runsC := filepath.Join(dir, "runs-b"), filepath.Join(dir, "runs-c")
	gateB, gateC := filepath.Join(dir, "gate-b"), filepath.Join(dir, "gate-c")
	prof := func(cmd []string, names ...string) string {
		var b strings.Builder
		for _, n := range names {
			fmt.Fprintf(&b, "[[profiles]]\nname = %q\nexecutor = \"exec\"\ncommand = %s\n\n", n, tomlList(cmd...))
		}
		return b.String()
	}
	a := newNode(t, dir, "a", "")
	b := newNode(t, dir, "b", prof(planWorker(t, runsB, gateB), "left", "work"))
	c := newNode(t, dir, "c", prof(planWorker(t, runsC, gateC), "right", "work"))
	a.start()
	b.start()
	c.start()
	for _, p := range []*testNode{b, c} {
		a.kith("peers", "add", p.addr("/tcp/")).mustSucceed(t)
		p.kith("peers", "allow", a.id).mustSucceed(t) // exec profiles are for verified peers
	}
	// b is trusted more: "work" goes to b first.
	a.kith("peers", "trust", b.id, "trusted").mustSucceed(t)

	planFile := filepath.Join(dir, "five.toml")
	if err := os.WriteFile(planFile, []byte(`
name = "e2e"
budget = 4000

[[subtasks]]
id = "x1"
profile = "left"
task = """found a rule
`+"```kith-decision"+`
{"slug": "use-tabs", "type": "style", "body": "indent with tabs"}
`+"```"+`
task: x1"""

[[subtasks]]
id = "x2"
profile = "right"
after = ["x1"]
task = "[gated] refine {{outputs.x1}}\ntask: x2"

[[subtasks]]
id = "y1"
profile = "work"
task = "[gated] other branch\ntask: y1"

[[subtasks]]
id = "join"
profile = "right"
after = ["x2", "y1"]
task = "join {{outputs.x2}} + {{outputs.y1}}\ntask: join"

[assemble]
profile = "echo"
task = "assembled:"
`), 0o600); err != nil {
		t.Fatal(err)
	}

	// Without a terminal and without --yes, nothing starts.
	r := a.kithIn(strings.NewReader("y\n"), "plan", "run", planFile)
	if r.code == 0 || !strings.Contains(r.stderr, "--yes") || !strings.Contains(r.stdout, "(not started)") {
		t.Fatalf("plan run without --yes and no terminal: %v", r)
	}
	if ls := a.kith("plan", "ls"); strings.Count(ls.stdout, "\n") != 1 {
		t.Fatalf("a refused plan was recorded: %v", ls)
	}
	r = a.kith("plan", "run", "--yes", planFile)
	r.mustSucceed(t)
	var id string
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "plan" && f[2] == "started" {
			id = f[1]
		}
	}
	if id == "" {
		t.Fatalf("no \"plan ID started\" line: %v", r)
	}

	// The first branch proposes; the proposal is merged from the CLI while
	// x2 (gated on c) keeps the join waiting.
	a.waitPlan(id, "x1's proposal", func(p api.Plan) bool { return len(p.Ledger) == 1 })
	r = a.kith("plan", "decisions", id)
	r.mustSucceed(t)
	if !strings.Contains(r.stdout, "use-tabs") || !strings.Contains(r.stdout, "pending") {
		t.Fatalf("plan decisions: %v", r)
	}
	if r := a.kith("plan", "decisions", id, "reject", "use-tabs"); r.code == 0 || !strings.Contains(r.stderr, "--why") {
		t.Fatalf("a rejection without a reason: %v", r)
	}
	a.kith("plan", "decisions", id, "merge", "use-tabs").mustSucceed(t)

	// y1 runs on b; b dies mid-task and comes back: y1 is re-offered to c.
	a.waitPlan(id, "y1 running on b", func(p api.Plan) bool {
		s := planStep(p, "y1")
		return s.State == "running" && len(s.Attempts) == 1 && s.Attempts[0].Peer == b.id && s.Attempts[0].Delegation != ""
	})
	b.restartSamePorts()
	p := a.waitPlan(id, "y1 re-offered to c", func(p api.Plan) bool {
		s := planStep(p, "y1")
		return len(s.Attempts) == 2 && s.Attempts[1].Peer == c.id
	})
	if s := planStep(p, "y1"); s.Attempts[0].State != "failed" || !strings.Contains(s.Attempts[0].Reason, "provider_restarted") {
		t.Fatalf("y1's first attempt: %+v", s.Attempts[0])
	}
	a.waitPlan(id, "x2 running on c", func(p api.Plan) bool { return planStep(p, "x2").State == "running" })

	// The coordinator dies mid-plan (x2 and y1 out on c) and comes back.
	a.kill()
	a.start()
	if err := os.WriteFile(gateC, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p = a.waitPlan(id, "the end", func(p api.Plan) bool { return p.State != "running" })
	if p.State != "completed" {
		t.Fatalf("plan ended %s: %s\n%s", p.State, p.Reason, a.kith("plan", "show", id).stdout)
	}
	want := map[string]string{"x1": b.id, "x2": c.id, "y1": c.id, "join": c.id}
	for sid, peer := range want {
		s := planStep(p, sid)
		if s.State != "done" || s.Attempts[len(s.Attempts)-1].Peer != peer {
			t.Errorf("%s: %s on %s, want done on %s", sid, s.State, s.Attempts[len(s.Attempts)-1].Peer, peer)
		}
	}
	if s := planStep(p, "assemble"); s.State != "done" || !s.Attempts[0].Local {
		t.Errorf("assemble: %+v", s)
	}
	if got := runsOf(t, runsB); got["x1"] != 1 || got["y1"] != 1 || len(got) != 2 {
		t.Errorf("b ran %v; want x1 and y1 once each", got)
	}
	if got := runsOf(t, runsC); got["x2"] != 1 || got["y1"] != 1 || got["join"] != 1 || len(got) != 3 {
		t.Errorf("c ran %v; want x2, y1 and join once each", got)
	}
	// The merged decision reached the join, before its task text.
	jd := a.delegation(planStep(p, "join").Attempts[0].Delegation)
	if !strings.HasPrefix(jd.Output, "Decisions in force") || !strings.Contains(jd.Output, "use-tabs (style): indent with tabs") ||
		strings.Contains(jd.Output, "kith-decision") {
		t.Errorf("join's output (its task, echoed):\n%s", jd.Output)
	}
	if !strings.Contains(p.Output, "assembled:") || !strings.Contains(p.Output, "--- fragment join ---") {
		t.Errorf("plan output:\n%s", p.Output)
	}
	show := a.kith("plan", "show", id)
	show.mustSucceed(t)
	for _, w := range []string{"✓ join", "← x2, y1", "failed on " + shortPeerOf(b.id) + ": provider_restarted", "on " + shortPeerOf(c.id)} {
		if !strings.Contains(show.stdout, w) {
			t.Errorf("plan show lacks %q:\n%s", w, show.stdout)
		}
	}
	if r := a.kith("plan", "decisions", id); !strings.Contains(r.stdout, "merges #1") || !strings.Contains(r.stdout, "merged (#2)") {
		t.Errorf("plan decisions after the merge: %v", r)
	}
}

// shortPeerOf is how "kith plan show" abbreviates a peer ID.
func shortPeerOf(id string) string { return id[:8] + "…" + id[len(id)-6:] }
