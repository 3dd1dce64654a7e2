package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Plan states.
const (
	StateRunning   = "running"
	StateCompleted = "completed"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
)

// Subtask states (the assemble step's too).
const (
	SubPending     = "pending"     // waiting for its dependencies, or for a retry
	SubDispatching = "dispatching" // its attempt is recorded; the delegation is being made
	SubRunning     = "running"     // its delegation is out
	SubDone        = "done"
	SubFailed      = "failed"
	SubSkipped     = "skipped" // the plan ended before it could run
	SubCancelled   = "cancelled"
)

// attemptDispatching is an attempt's state before its delegation exists.
const attemptDispatching = "dispatching"

// Errors of the coordinator's operations.
var (
	ErrUnknownPlan = errors.New("plan: unknown plan")
	ErrFinished    = errors.New("plan: the plan has already ended")
	ErrNotRunning  = errors.New("plan: the coordinator is not running")
)

// Config is what a Coordinator needs; Engine and Store are required (the
// store the engine uses).
type Config struct {
	Engine *delegation.Engine
	Store  *store.Store
	// Finder lists candidate providers of a profile, for re-offers and for
	// Check; without it only providers the engine already knows are used.
	Finder delegation.PeerFinder
	Logger *slog.Logger
}

// Coordinator runs WorkPlans. Construction does no I/O; Run resumes the
// plans a previous run left unfinished and owns every goroutine.
type Coordinator struct {
	cfg  Config
	eng  *delegation.Engine
	st   *store.Store
	self peer.ID
	log  *slog.Logger

	mu      sync.Mutex
	runCtx  context.Context
	runs    map[protocol.DelegationID]*runner
	changed chan struct{} // closed and replaced whenever a plan changes
	wg      sync.WaitGroup
}

// New returns a coordinator over cfg.Engine.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Engine == nil || cfg.Store == nil {
		return nil, errors.New("plan: Config needs Engine and Store")
	}
	_, a, err := cfg.Engine.Advert()
	if err != nil {
		return nil, fmt.Errorf("plan: this node's identity: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Coordinator{
		cfg: cfg, eng: cfg.Engine, st: cfg.Store, self: a.Provider,
		log:  log.With("component", "plan"),
		runs: map[protocol.DelegationID]*runner{}, changed: make(chan struct{}),
	}, nil
}

// Run resumes every plan left running, then serves until ctx ends, and
// returns once every goroutine it started has stopped. The engine must be
// running (its Run called) first.
func (c *Coordinator) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.runCtx != nil {
		c.mu.Unlock()
		return errors.New("plan: Run called twice")
	}
	c.runCtx = ctx
	c.mu.Unlock()
	plans, err := c.st.ListPlans()
	if err == nil {
		for _, p := range plans {
			if p.State != StateRunning {
				continue
			}
			c.log.Info("resuming plan", "plan", p.ID)
			if rerr := c.resume(p); rerr != nil {
				c.log.Error("cannot resume plan", "plan", p.ID, "err", rerr)
				if !errors.Is(rerr, errUnreadable) {
					err = errors.Join(err, rerr)
					continue
				}
				// A plan whose records cannot be read back cannot go on;
				// say so rather than leave it running forever.
				if _, uerr := c.st.UpdatePlan(p.ID, func(x *store.Plan) error {
					x.State, x.Reason = StateFailed, "cannot resume: "+rerr.Error()
					return nil
				}); uerr != nil {
					err = errors.Join(err, uerr)
				}
				c.notify()
			}
		}
	}
	<-ctx.Done()
	c.wg.Wait()
	return err
}

// errUnreadable: a stored plan's records make no plan (a spec that does
// not decode or validate, a step without its record).
var errUnreadable = errors.New("plan: stored plan unreadable")

func (c *Coordinator) resume(p store.Plan) error {
	var spec Spec
	if err := json.Unmarshal(p.Spec, &spec); err != nil {
		return fmt.Errorf("%w: %s: spec: %v", errUnreadable, p.ID, err)
	}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("%w: %s: spec: %v", errUnreadable, p.ID, err)
	}
	subs, err := c.st.PlanSubtasks(p.ID)
	if err != nil {
		return err
	}
	return c.start(p.ID, &spec, subs)
}

// notify wakes every Wait.
func (c *Coordinator) notify() {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func (c *Coordinator) changes() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Start checks s (Check), records the plan with every subtask pending and
// starts dispatching it. It returns the plan's ID, which is also the
// Parent of every delegation the plan makes, once the plan is durable.
func (c *Coordinator) Start(ctx context.Context, s *Spec) (protocol.DelegationID, error) {
	c.mu.Lock()
	running := c.runCtx != nil && c.runCtx.Err() == nil
	c.mu.Unlock()
	if !running {
		return protocol.DelegationID{}, ErrNotRunning
	}
	if err := c.Check(ctx, s); err != nil {
		return protocol.DelegationID{}, err
	}
	id := protocol.NewDelegationID()
	var subs []store.PlanSubtask
	for _, sid := range stepOrder(s) {
		subs = append(subs, store.PlanSubtask{Plan: id, ID: sid, State: SubPending})
	}
	if err := c.st.CreatePlan(store.Plan{ID: id, Name: s.Name, Spec: s.JSON(), State: StateRunning}, subs); err != nil {
		return protocol.DelegationID{}, err
	}
	c.log.Info("plan started", "plan", id, "subtasks", len(s.Subtasks))
	return id, c.start(id, s, subs)
}

// stepOrder is the plan's steps in dependency order, the assemble step last.
func stepOrder(s *Spec) []string {
	out := order(s.Subtasks)
	if s.Assemble != nil {
		out = append(out, AssembleID)
	}
	return out
}

func (c *Coordinator) start(id protocol.DelegationID, s *Spec, subs []store.PlanSubtask) error {
	r := &runner{
		c: c, id: id, spec: s, order: stepOrder(s), subs: map[string]*store.PlanSubtask{},
		results: make(chan result, len(subs)+1), stop: make(chan string, 1), outputs: map[string]string{}, dirty: map[string]bool{},
	}
	for i := range subs {
		r.subs[subs[i].ID] = &subs[i]
	}
	for _, sid := range r.order {
		if r.subs[sid] == nil {
			return fmt.Errorf("%w: %s: no record of step %q", errUnreadable, id, sid)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runCtx == nil || c.runCtx.Err() != nil {
		return ErrNotRunning
	}
	ctx, cancel := context.WithCancel(c.runCtx)
	r.ctx, r.cancel = ctx, cancel
	c.runs[id] = r
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		r.run()
		c.mu.Lock()
		delete(c.runs, id)
		c.mu.Unlock()
		c.notify()
	}()
	return nil
}

// Cancel ends a running plan: its delegations in flight are cancelled and
// the subtasks not yet done are marked cancelled or skipped.
func (c *Coordinator) Cancel(id protocol.DelegationID, reason string) error {
	if reason == "" {
		reason = "cancelled by the plan's owner"
	}
	c.mu.Lock()
	r := c.runs[id]
	c.mu.Unlock()
	if r == nil {
		p, err := c.st.GetPlan(id)
		if err != nil {
			return fmt.Errorf("%w: %s", ErrUnknownPlan, id)
		}
		return fmt.Errorf("%w: %s is %s", ErrFinished, id, p.State)
	}
	select {
	case r.stop <- reason:
	default: // a cancel is already on its way
	}
	select {
	case <-r.ctx.Done():
	case <-time.After(30 * time.Second):
		return errors.New("plan: cancel did not finish in 30s")
	}
	return nil
}

// Merge merges the pending proposal that ref names (its entry number, or
// its slug): a decision entry that links to it is appended. origin says
// who merged it ("cli", "api").
func (c *Coordinator) Merge(id protocol.DelegationID, ref, origin string) (store.PlanEntry, error) {
	return c.settle(id, KindDecision, ref, "", origin)
}

// Reject rejects the pending proposal ref names, for the reason why; the
// rejection is kept in the ledger.
func (c *Coordinator) Reject(id protocol.DelegationID, ref, why, origin string) (store.PlanEntry, error) {
	why = strings.TrimSpace(why)
	if why == "" {
		return store.PlanEntry{}, ErrNeedsReason
	}
	if len(why) > maxWhyBytes {
		return store.PlanEntry{}, fmt.Errorf("%w: reason of %d bytes, at most %d", ErrInvalid, len(why), maxWhyBytes)
	}
	return c.settle(id, KindRejection, ref, why, origin)
}

func (c *Coordinator) settle(id protocol.DelegationID, kind, ref, why, origin string) (store.PlanEntry, error) {
	if len(origin) > maxOriginBytes {
		origin = origin[:maxOriginBytes]
	}
	if _, err := c.st.GetPlan(id); err != nil {
		return store.PlanEntry{}, fmt.Errorf("%w: %s", ErrUnknownPlan, id)
	}
	out, err := c.st.AppendPlanEntries(id, settleEntry(kind, ref, why, origin))
	if err != nil {
		return store.PlanEntry{}, err
	}
	c.log.Info("ledger entry settled", "plan", id, "kind", kind, "proposal", out[0].Ref, "slug", out[0].Slug, "origin", origin)
	c.notify()
	return out[0], nil
}

// Ledger returns a plan's ledger with each proposal's status.
func (c *Coordinator) Ledger(id protocol.DelegationID) ([]Entry, error) {
	if _, err := c.st.GetPlan(id); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownPlan, id)
	}
	l, err := c.st.PlanLedger(id)
	if err != nil {
		return nil, err
	}
	return settle(l), nil
}

// Wait blocks until the plan has ended, or ctx does, and returns its view.
func (c *Coordinator) Wait(ctx context.Context, id protocol.DelegationID) (View, error) {
	for {
		ch := c.changes()
		v, err := c.Get(id)
		if err != nil || v.State != StateRunning {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-ch:
		}
	}
}
