package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// MaxPlanBody caps POST /plans: a plan file of at most 1 MiB, JSON-escaped.
const MaxPlanBody = 6<<20 + 4<<10

// PlanRun is POST /plans: a plan file's text, checked and (unless
// CheckOnly) started.
type PlanRun struct {
	// Name is the file's name; its extension (.toml, .json) picks the
	// format, else text starting with '{' is JSON and the rest TOML.
	Name string `json:"name,omitempty"`
	Plan string `json:"plan"`
	// CheckOnly validates the plan against this node and the mesh and
	// returns it as it would run (budgets shared out, steps in order)
	// without recording or starting anything: the confirmation gate.
	CheckOnly bool `json:"check_only,omitempty"`
}

// Plan is a WorkPlan as its coordinator sees it (POST /plans, GET
// /plans/{id}); GET /plans leaves out steps and ledger.
type Plan struct {
	ID        string        `json:"id,omitempty"` // empty for a checked plan
	Name      string        `json:"name,omitempty"`
	State     string        `json:"state"` // checked, running, completed, failed, cancelled
	Reason    string        `json:"reason,omitempty"`
	Budget    uint64        `json:"budget"`
	Used      uint64        `json:"used"`
	Attempts  int           `json:"attempts_per_step,omitempty"`
	CreatedAt time.Time     `json:"created_at,omitzero"`
	UpdatedAt time.Time     `json:"updated_at,omitzero"`
	Steps     []PlanStep    `json:"steps,omitempty"`
	Ledger    []LedgerEntry `json:"ledger,omitempty"`
	Output    string        `json:"output,omitempty"`
}

// PlanStep is one subtask of a plan, or its assemble step (id "assemble").
type PlanStep struct {
	ID       string        `json:"id"`
	Profile  string        `json:"profile"`
	After    []string      `json:"after,omitempty"`
	State    string        `json:"state"` // pending, dispatching, running, done, failed, skipped, cancelled
	Budget   uint64        `json:"budget"`
	Used     uint64        `json:"used"`
	Peer     string        `json:"peer,omitempty"`      // the step's pinned provider, if any
	MinTrust string        `json:"min_trust,omitempty"` // the step's trust constraint, if any
	Task     string        `json:"task,omitempty"`      // the task text as written in the plan
	Attempts []PlanAttempt `json:"attempts,omitempty"`
}

// PlanAttempt is one delegation made for a step: where it ran and how it
// ended.
type PlanAttempt struct {
	Delegation string    `json:"delegation,omitempty"`
	Peer       string    `json:"peer,omitempty"`
	Local      bool      `json:"local,omitempty"`
	State      string    `json:"state"`
	Reason     string    `json:"reason,omitempty"`
	Budget     uint64    `json:"budget"`
	Used       uint64    `json:"used,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
}

// LedgerEntry is one entry of a plan's decisions ledger. Entries are only
// appended: a proposal (with its status), and the decision or rejection
// that settles it (ref names the proposal).
type LedgerEntry struct {
	Seq        uint64    `json:"seq"`
	Kind       string    `json:"kind"` // proposal, decision, rejection
	Slug       string    `json:"slug"`
	Type       string    `json:"type,omitempty"`
	Body       string    `json:"body,omitempty"`
	Subtask    string    `json:"subtask,omitempty"`
	Delegation string    `json:"delegation,omitempty"`
	Ref        uint64    `json:"ref,omitempty"`
	Why        string    `json:"why,omitempty"`
	Origin     string    `json:"origin,omitempty"`
	At         time.Time `json:"at"`
	Status     string    `json:"status,omitempty"` // a proposal's: pending, merged, rejected
	SettledBy  uint64    `json:"settled_by,omitempty"`
}

// LedgerAction is POST /plans/{id}/decisions/merge and .../reject: ref is
// a proposal's entry number or slug; a rejection needs why.
type LedgerAction struct {
	Ref    string `json:"ref"`
	Why    string `json:"why,omitempty"`
	Origin string `json:"origin,omitempty"` // for the ledger; default "api"
}

// PlanCancel is POST /plans/{id}/cancel.
type PlanCancel struct {
	Reason string `json:"reason,omitempty"`
}

// CheckPlan validates a plan file and returns it as it would run.
func (c *Client) CheckPlan(ctx context.Context, name, text string) (Plan, error) {
	var p Plan
	return p, c.do(ctx, http.MethodPost, "/plans", PlanRun{Name: name, Plan: text, CheckOnly: true}, &p)
}

// RunPlan checks and starts a plan; it returns once the plan is durable.
func (c *Client) RunPlan(ctx context.Context, name, text string) (Plan, error) {
	var p Plan
	return p, c.do(ctx, http.MethodPost, "/plans", PlanRun{Name: name, Plan: text}, &p)
}

// Plans lists the plans this node coordinates, newest first.
func (c *Client) Plans(ctx context.Context) ([]Plan, error) {
	var ps []Plan
	return ps, c.do(ctx, http.MethodGet, "/plans", nil, &ps)
}

// Plan returns one plan with its steps and ledger.
func (c *Client) Plan(ctx context.Context, id string) (Plan, error) {
	var p Plan
	return p, c.do(ctx, http.MethodGet, "/plans/"+url.PathEscape(id), nil, &p)
}

// CancelPlan ends a running plan.
func (c *Client) CancelPlan(ctx context.Context, id, reason string) error {
	return c.do(ctx, http.MethodPost, "/plans/"+url.PathEscape(id)+"/cancel", PlanCancel{Reason: reason}, nil)
}

// Decisions returns a plan's ledger.
func (c *Client) Decisions(ctx context.Context, id string) ([]LedgerEntry, error) {
	var es []LedgerEntry
	return es, c.do(ctx, http.MethodGet, "/plans/"+url.PathEscape(id)+"/decisions", nil, &es)
}

// MergeDecision merges a pending proposal; it returns the decision entry.
func (c *Client) MergeDecision(ctx context.Context, id string, a LedgerAction) (LedgerEntry, error) {
	var e LedgerEntry
	return e, c.do(ctx, http.MethodPost, "/plans/"+url.PathEscape(id)+"/decisions/merge", a, &e)
}

// RejectDecision rejects a pending proposal; it returns the rejection entry.
func (c *Client) RejectDecision(ctx context.Context, id string, a LedgerAction) (LedgerEntry, error) {
	var e LedgerEntry
	return e, c.do(ctx, http.MethodPost, "/plans/"+url.PathEscape(id)+"/decisions/reject", a, &e)
}
