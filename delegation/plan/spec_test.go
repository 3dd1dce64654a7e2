package plan

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/store"
)

// Every bad plan is refused with an error that names the rule and the
// field, and nothing is recorded or dispatched.
func TestPlanBadInput(t *testing.T) {
	w := newWorker("B")
	m := newMesh(t, 2, func(i int) []delegation.Profile {
		if i == 1 {
			return []delegation.Profile{w.profile("work")}
		}
		return nil
	})
	a := m.nodes[0]
	cases := []struct {
		name, file, text string
		want             []string
	}{
		{"cycle", "p.toml", `
budget = 10
[[subtasks]]
id = "a"
profile = "work"
task = "t"
after = ["c"]
[[subtasks]]
id = "b"
profile = "work"
task = "t"
after = ["a"]
[[subtasks]]
id = "c"
profile = "work"
task = "t"
after = ["b"]`, []string{"cycle: a → c → b → a"}},
		{"self loop", "p.json", `{"budget": 10, "subtasks": [{"id": "a", "profile": "work", "task": "t", "after": ["a"]}]}`,
			[]string{"cycle: a → a"}},
		{"unknown profile", "p.json", `{"budget": 10, "subtasks": [{"id": "a", "profile": "nobody-offers-this", "task": "t"}]}`,
			[]string{"subtasks[0].profile", `"nobody-offers-this" is offered neither by this node nor by any known peer`}},
		{"unknown assemble profile", "p.json", `{"budget": 10, "subtasks": [{"id": "a", "profile": "work", "task": "t"}], "assemble": {"profile": "nope"}}`,
			[]string{"assemble.profile"}},
		{"output of a non-dependency", "p.json", `{"budget": 10, "subtasks": [
			{"id": "a", "profile": "work", "task": "t"},
			{"id": "b", "profile": "work", "task": "use {{outputs.a}}"}]}`,
			[]string{`subtasks[1].task: {{outputs.a}}: "a" is not among its dependencies`}},
		{"output of a missing subtask", "p.json", `{"budget": 10, "subtasks": [{"id": "a", "profile": "work", "task": "use {{outputs.zz}}"}]}`,
			[]string{`{{outputs.zz}}: no subtask "zz"`}},
		{"unknown placeholder", "p.json", `{"budget": 10, "subtasks": [{"id": "a", "profile": "work", "task": "use {{secrets}}"}]}`,
			[]string{"unknown placeholder {{secrets}}"}},
		{"edge to nowhere", "p.json", `{"budget": 10, "subtasks": [{"id": "a", "profile": "work", "task": "t", "after": ["ghost"]}]}`,
			[]string{`subtasks[0].after[0]: no subtask "ghost"`}},
		{"duplicate ids", "p.json", `{"budget": 10, "subtasks": [{"id": "a", "profile": "work", "task": "t"}, {"id": "a", "profile": "work", "task": "t"}]}`,
			[]string{`subtasks[1].id: duplicate id "a" (also subtasks[0])`}},
		{"budgets over the plan's", "p.json", `{"budget": 10, "subtasks": [{"id": "a", "profile": "work", "task": "t", "budget": 6}, {"id": "b", "profile": "work", "task": "t", "budget": 5}]}`,
			[]string{"sum to 11 tokens, over the plan's 10"}},
		{"no budget left to share", "p.json", `{"budget": 10, "subtasks": [{"id": "a", "profile": "work", "task": "t", "budget": 10}, {"id": "b", "profile": "work", "task": "t"}]}`,
			[]string{"0 tokens left for 1 steps"}},
		{"no plan budget", "p.json", `{"subtasks": [{"id": "a", "profile": "work", "task": "t"}]}`, []string{"budget: the plan needs a token budget"}},
		{"no subtasks", "p.json", `{"budget": 1}`, []string{"at least one subtask"}},
		{"reserved id", "p.json", `{"budget": 1, "subtasks": [{"id": "assemble", "profile": "work", "task": "t"}]}`, []string{"the assemble step's"}},
		{"bad id", "p.json", `{"budget": 1, "subtasks": [{"id": "a/b", "profile": "work", "task": "t"}]}`, []string{"subtasks[0].id"}},
		{"bad trust", "p.json", `{"budget": 1, "subtasks": [{"id": "a", "profile": "work", "task": "t", "min_trust": "lots"}]}`, []string{"subtasks[0].min_trust"}},
		{"bad peer", "p.json", `{"budget": 1, "subtasks": [{"id": "a", "profile": "work", "task": "t", "peer": "not-a-peer"}]}`, []string{"subtasks[0].peer"}},
		{"too many attempts", "p.json", `{"budget": 1, "retry": {"attempts": 99}, "subtasks": [{"id": "a", "profile": "work", "task": "t"}]}`, []string{"retry.attempts"}},
		{"empty task", "p.json", `{"budget": 1, "subtasks": [{"id": "a", "profile": "work"}]}`, []string{"subtasks[0].task: empty"}},
		{"unknown key (json)", "p.json", `{"budget": 1, "subtask": []}`, []string{`unknown field "subtask"`}},
		{"unknown key (toml)", "p.toml", "budget = 1\nbugdet = 2\n", []string{"bugdet"}},
		{"not a plan", "p.toml", "[[[", []string{"p.toml"}},
		{"trailing json", "p.json", `{"budget": 1} {}`, []string{"text after the plan object"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.file, []byte(tc.text))
			if err == nil {
				_, err = a.coord().Start(context.Background(), s)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
	// Nothing was recorded, nothing delegated, nothing run.
	ps, err := a.store().ListPlans()
	if err != nil || len(ps) != 0 {
		t.Fatalf("plans after refusals: %v %+v", err, ps)
	}
	ds, err := a.store().ListDelegations(store.DelegationFilter{Role: ptr(store.RoleRequester)})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		t.Errorf("a refused plan delegated %s (%s)", d.ID, d.Profile)
	}
	if len(w.seen()) != 0 {
		t.Errorf("the provider ran %d tasks", len(w.seen()))
	}
}

// Budgets left unnamed share what the named ones leave, and a plan's
// steps never get more together than its budget.
func TestBudgetShare(t *testing.T) {
	s, err := Parse("p.json", []byte(`{"budget": 100, "subtasks": [
		{"id": "a", "profile": "p", "task": "t", "budget": 40},
		{"id": "b", "profile": "p", "task": "t"},
		{"id": "c", "profile": "p", "task": "t"}], "assemble": {"profile": "p"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, st := range s.steps() {
		sum += st.Budget
	}
	if s.Subtasks[1].Budget != 20 || s.Assemble.Budget != 20 || sum > 100 {
		t.Fatalf("budgets %d %d %d %d (sum %d)", s.Subtasks[0].Budget, s.Subtasks[1].Budget, s.Subtasks[2].Budget, s.Assemble.Budget, sum)
	}
	// Validating again (as a resumed plan is) changes nothing.
	before := string(s.JSON())
	if err := s.Validate(); err != nil || string(s.JSON()) != before {
		t.Fatalf("second Validate: %v\n%s\n%s", err, before, s.JSON())
	}
}

// The same plan in TOML and in JSON is the same plan.
func TestTOMLAndJSONAgree(t *testing.T) {
	tm := parse(t, "five.toml", fivePlan)
	js := parse(t, "five.json", string(tm.JSON()))
	if string(tm.JSON()) != string(js.JSON()) {
		t.Fatalf("toml %s\njson %s", tm.JSON(), js.JSON())
	}
	if got := strings.Join(order(tm.Subtasks), ","); got != "x1,x2,y1,join" {
		t.Fatalf("order %s", got)
	}
}
