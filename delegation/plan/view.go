package plan

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// View is a plan as it stands: its steps in dependency order (the
// assemble step last) with every attempt, and its ledger.
type View struct {
	ID        protocol.DelegationID
	Name      string
	State     string
	Reason    string
	Budget    uint64
	Used      uint64
	CreatedAt time.Time
	UpdatedAt time.Time
	Steps     []StepView
	Ledger    []Entry
	// Output is the assemble step's output, or without one every
	// fragment in dependency order; set once the plan completed.
	Output string
	Spec   *Spec
}

// StepView is one step of a plan.
type StepView struct {
	ID       string
	Profile  string
	Task     string // as the plan wrote it
	Peer     string
	MinTrust string
	After    []string
	State    string
	Budget   uint64
	Used     uint64
	Attempts []store.PlanAttempt
}

// Get returns a plan's view.
func (c *Coordinator) Get(id protocol.DelegationID) (View, error) {
	p, err := c.st.GetPlan(id)
	if err != nil {
		return View{}, fmt.Errorf("%w: %s", ErrUnknownPlan, id)
	}
	var spec Spec
	if err := json.Unmarshal(p.Spec, &spec); err != nil {
		return View{}, fmt.Errorf("plan %s: stored spec: %w", id, err)
	}
	subs, err := c.st.PlanSubtasks(id)
	if err != nil {
		return View{}, err
	}
	byID := map[string]store.PlanSubtask{}
	for _, s := range subs {
		byID[s.ID] = s
	}
	ledger, err := c.Ledger(id)
	if err != nil {
		return View{}, err
	}
	v := View{ID: id, Name: p.Name, State: p.State, Reason: p.Reason, Budget: spec.Budget,
		CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, Ledger: ledger, Spec: &spec}
	for _, sv := range spec.stepViews() {
		s := byID[sv.ID]
		sv.State, sv.Used, sv.Attempts = s.State, spent(&s), s.Attempts
		v.Used += sv.Used
		v.Steps = append(v.Steps, sv)
	}
	if p.State == StateCompleted {
		v.Output = c.planOutput(v)
	}
	return v, nil
}

// stepViews is the plan's steps in dependency order, the assemble step
// last, as written (no state).
func (s *Spec) stepViews() []StepView {
	var out []StepView
	for _, sid := range stepOrder(s) {
		st, _ := s.step(sid)
		sv := StepView{ID: sid, Profile: st.Profile, Task: st.Task, Peer: st.Peer, MinTrust: st.MinTrust, Budget: st.Budget}
		if sid == AssembleID {
			sv.After = order(s.Subtasks)
		} else {
			for _, x := range s.Subtasks {
				if x.ID == sid {
					sv.After = x.After
				}
			}
		}
		out = append(out, sv)
	}
	return out
}

// Preview is a validated plan as it would run: its steps in dependency
// order with their budgets shared out, in state "checked".
func (s *Spec) Preview() View {
	v := View{Name: s.Name, State: "checked", Budget: s.Budget, Spec: s}
	for _, sv := range s.stepViews() {
		sv.State = SubPending
		v.Steps = append(v.Steps, sv)
	}
	return v
}

func (c *Coordinator) planOutput(v View) string {
	out := func(s StepView) string {
		if len(s.Attempts) == 0 {
			return ""
		}
		d, err := c.eng.Get(s.Attempts[len(s.Attempts)-1].Delegation)
		if err != nil {
			return ""
		}
		return stripProposals(delegation.Output(d))
	}
	if last := v.Steps[len(v.Steps)-1]; last.ID == AssembleID {
		return out(last)
	}
	var parts []string
	for _, s := range v.Steps {
		parts = append(parts, out(s))
	}
	return strings.Join(parts, "\n\n")
}

// List returns every plan this node coordinates, newest first, without
// steps or ledger.
func (c *Coordinator) List() ([]View, error) {
	ps, err := c.st.ListPlans()
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(ps))
	for _, p := range ps {
		v := View{ID: p.ID, Name: p.Name, State: p.State, Reason: p.Reason, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
		var spec Spec
		if json.Unmarshal(p.Spec, &spec) == nil {
			v.Budget = spec.Budget
		}
		out = append(out, v)
	}
	return out, nil
}
