package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/delegation/plan"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// startPlans makes the WorkPlan coordinator over the running engine and
// runs it, resuming the plans a previous run left unfinished. stop ends it
// (before the engine stops) and returns Run's error. A coordinator that
// cannot be made leaves the node without plans (the routes answer 503),
// not without the rest.
func (n *Node) startPlans(eng *delegation.Engine, st *store.Store, fnd delegation.PeerFinder) (stop func() error) {
	co, err := plan.New(plan.Config{Engine: eng, Store: st, Finder: fnd, Logger: n.opts.Logger})
	if err != nil {
		n.log.Error("plans unavailable", "err", err)
		return func() error { return nil }
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- co.Run(ctx) }()
	n.mu.Lock()
	n.plans = co
	n.mu.Unlock()
	return func() error { cancel(); return <-done }
}

// Plans is the WorkPlan coordinator; valid after Ready (nil if it could
// not be made).
func (n *Node) Plans() *plan.Coordinator {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.plans
}

// coordinator is Plans, or a 503 written to w.
func (n *Node) coordinator(w http.ResponseWriter) (*plan.Coordinator, bool) {
	co := n.Plans()
	if co == nil {
		writeErr(w, http.StatusServiceUnavailable, plan.ErrNotRunning)
	}
	return co, co != nil
}

func planToAPI(v plan.View) api.Plan {
	out := api.Plan{
		ID: v.ID.String(), Name: v.Name, State: v.State, Reason: v.Reason, Budget: v.Budget, Used: v.Used,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Output: v.Output,
	}
	if v.ID.IsZero() {
		out.ID = ""
	}
	if v.Spec != nil {
		out.Attempts = v.Spec.Retry.Attempts
	}
	for _, s := range v.Steps {
		as := api.PlanStep{ID: s.ID, Profile: s.Profile, After: s.After, State: s.State, Budget: s.Budget, Used: s.Used,
			Peer: s.Peer, MinTrust: s.MinTrust, Task: s.Task}
		for _, a := range s.Attempts {
			aa := api.PlanAttempt{Local: a.Local, State: a.State, Reason: a.Reason, Budget: a.Budget, Used: a.Used,
				StartedAt: a.StartedAt, EndedAt: a.EndedAt}
			if !a.Delegation.IsZero() {
				aa.Delegation = a.Delegation.String()
			}
			if a.Peer != "" {
				aa.Peer = a.Peer.String()
			}
			as.Attempts = append(as.Attempts, aa)
		}
		out.Steps = append(out.Steps, as)
	}
	for _, e := range v.Ledger {
		out.Ledger = append(out.Ledger, entryToAPI(e))
	}
	return out
}

func entryToAPI(e plan.Entry) api.LedgerEntry {
	out := api.LedgerEntry{
		Seq: e.Seq, Kind: e.Kind, Slug: e.Slug, Type: e.Type, Body: e.Body, Subtask: e.Subtask, Ref: e.Ref,
		Why: e.Why, Origin: e.Origin, At: e.At, Status: string(e.Status), SettledBy: e.SettledBy,
	}
	if !e.Delegation.IsZero() {
		out.Delegation = e.Delegation.String()
	}
	return out
}

// planErrCode maps the coordinator's errors to HTTP status codes.
func planErrCode(err error) int {
	switch {
	case errors.Is(err, plan.ErrInvalid), errors.Is(err, plan.ErrNeedsReason):
		return http.StatusBadRequest
	case errors.Is(err, plan.ErrUnknownPlan), errors.Is(err, plan.ErrNoEntry):
		return http.StatusNotFound
	case errors.Is(err, plan.ErrNotPending), errors.Is(err, plan.ErrFinished):
		return http.StatusConflict
	case errors.Is(err, plan.ErrNotRunning):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (n *Node) handlePlanRun(w http.ResponseWriter, r *http.Request) {
	var req api.PlanRun
	if !decodeBodyMax(w, r, &req, api.MaxPlanBody) {
		return
	}
	s, err := plan.Parse(req.Name, []byte(req.Plan))
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	co, ok := n.coordinator(w)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if req.CheckOnly {
		if err := co.Check(ctx, s); err != nil {
			writeErr(w, planErrCode(err), err)
			return
		}
		writeJSON(w, http.StatusOK, planToAPI(s.Preview()))
		return
	}
	id, err := co.Start(ctx, s)
	if err != nil {
		writeErr(w, planErrCode(err), err)
		return
	}
	v, err := co.Get(id)
	if err != nil {
		writeErr(w, planErrCode(err), err)
		return
	}
	writeJSON(w, http.StatusOK, planToAPI(v))
}

func (n *Node) handlePlans(w http.ResponseWriter, _ *http.Request) {
	co, ok := n.coordinator(w)
	if !ok {
		return
	}
	vs, err := co.List()
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	out := []api.Plan{}
	for _, v := range vs {
		out = append(out, planToAPI(v))
	}
	writeJSON(w, http.StatusOK, out)
}

// planID reads the route's plan ID, and the coordinator.
func (n *Node) planID(w http.ResponseWriter, r *http.Request) (protocol.DelegationID, *plan.Coordinator, bool) {
	co, ok := n.coordinator(w)
	if !ok {
		return protocol.DelegationID{}, nil, false
	}
	id, err := protocol.ParseDelegationID(r.PathValue("id"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("plan id: %w", err))
		return id, nil, false
	}
	return id, co, true
}

func (n *Node) handlePlan(w http.ResponseWriter, r *http.Request) {
	id, co, ok := n.planID(w, r)
	if !ok {
		return
	}
	v, err := co.Get(id)
	if err != nil {
		writeErr(w, planErrCode(err), err)
		return
	}
	writeJSON(w, http.StatusOK, planToAPI(v))
}

func (n *Node) handlePlanCancel(w http.ResponseWriter, r *http.Request) {
	id, co, ok := n.planID(w, r)
	if !ok {
		return
	}
	var req api.PlanCancel
	if !decodeBody(w, r, &req) {
		return
	}
	if err := co.Cancel(id, req.Reason); err != nil {
		writeErr(w, planErrCode(err), err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (n *Node) handleDecisions(w http.ResponseWriter, r *http.Request) {
	id, co, ok := n.planID(w, r)
	if !ok {
		return
	}
	l, err := co.Ledger(id)
	if err != nil {
		writeErr(w, planErrCode(err), err)
		return
	}
	out := []api.LedgerEntry{}
	for _, e := range l {
		out = append(out, entryToAPI(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleDecision merges or rejects a proposal (the route's last segment).
func (n *Node) handleDecision(w http.ResponseWriter, r *http.Request) {
	id, co, ok := n.planID(w, r)
	if !ok {
		return
	}
	var req api.LedgerAction
	if !decodeBody(w, r, &req) {
		return
	}
	origin := req.Origin
	if origin == "" {
		origin = "api"
	}
	var e store.PlanEntry
	var err error
	if strings.HasSuffix(r.URL.Path, "/reject") {
		e, err = co.Reject(id, req.Ref, req.Why, origin)
	} else {
		e, err = co.Merge(id, req.Ref, origin)
	}
	if err != nil {
		writeErr(w, planErrCode(err), err)
		return
	}
	writeJSON(w, http.StatusOK, entryToAPI(plan.Entry{PlanEntry: e}))
}

// planTree hangs the delegations of each plan this node coordinates under
// one node for the plan itself (its ID, "plan NAME" as the profile, its
// state and tokens), so that GET /tree and the dashboard show a plan as
// the parent of its subtasks. Everything else stays as it was.
func (n *Node) planTree(roots []api.TreeNode) []api.TreeNode {
	co := n.Plans()
	if co == nil {
		return roots
	}
	plans := map[string]*api.TreeNode{}
	var out []api.TreeNode
	var order []string
	for _, r := range roots {
		if r.Parent == "" {
			out = append(out, r)
			continue
		}
		pn, ok := plans[r.Parent]
		if !ok {
			id, err := protocol.ParseDelegationID(r.Parent)
			if err != nil {
				out = append(out, r)
				continue
			}
			v, err := co.Get(id)
			if err != nil {
				out = append(out, r) // a child whose parent is not a plan of this node
				continue
			}
			profile := "plan"
			if v.Name != "" {
				profile = "plan " + v.Name
			}
			pn = &api.TreeNode{Delegation: api.Delegation{
				ID: v.ID.String(), Role: api.RoleRequester, Profile: profile, State: planState(v.State), Reason: v.Reason,
				Budget: v.Budget, Usage: api.Usage{Total: v.Used}, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
				Terminal: v.State != plan.StateRunning,
			}}
			plans[r.Parent] = pn
			order = append(order, r.Parent)
		}
		pn.Children = append(pn.Children, r)
	}
	for _, id := range order {
		out = append(out, *plans[id])
	}
	return out
}

// planState is a plan's state as the delegation state a tree node shows.
func planState(s string) api.State {
	switch s {
	case plan.StateCompleted:
		return protocol.StateCompleted
	case plan.StateFailed:
		return protocol.StateFailed
	case plan.StateCancelled:
		return protocol.StateCancelled
	}
	return protocol.StateRunning
}
