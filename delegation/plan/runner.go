package plan

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// runner advances one plan. Its goroutine alone changes the plan's
// subtasks; watchers only report the delegations they waited on.
type runner struct {
	c       *Coordinator
	id      protocol.DelegationID
	spec    *Spec
	order   []string
	subs    map[string]*store.PlanSubtask
	outputs map[string]string // finished steps' outputs, read once
	results chan result
	stop    chan string
	dirty   map[string]bool // subtasks changed since the last flush
	props   []proposed      // proposals settled since the last flush
	ctx     context.Context
	cancel  context.CancelFunc
}

type result struct {
	sub string
	d   store.Delegation
}

// lazyFlush is how long a change that needs no write of its own (a
// delegation ID, which the attempt's marker also finds) may wait for the
// next write before it gets one.
const lazyFlush = 50 * time.Millisecond

// retryPause is how long a runner waits before trying again a dispatch the
// engine could not take (it was stopping or not yet running).
const retryPause = 200 * time.Millisecond

func (r *runner) now() time.Time { return time.Now().UTC() }

func (r *runner) deps(id string) []string {
	if id == AssembleID {
		return order(r.spec.Subtasks)
	}
	for _, s := range r.spec.Subtasks {
		if s.ID == id {
			return s.After
		}
	}
	return nil
}

func (r *runner) run() {
	for _, id := range r.order {
		s := r.subs[id]
		switch s.State {
		case SubDispatching:
			r.recoverDispatch(s)
		case SubRunning:
			r.watch(s)
		}
	}
	if r.flush() != nil {
		return
	}
	var lazy <-chan time.Time
	for {
		again, over := r.advance()
		if over {
			return
		}
		var tick <-chan time.Time
		if again {
			tick = time.After(retryPause)
		}
		if len(r.dirty) > 0 && lazy == nil {
			lazy = time.After(lazyFlush)
		}
		select {
		case <-r.ctx.Done():
			return
		case why := <-r.stop:
			r.end(StateCancelled, why)
			return
		case res := <-r.results:
			// Results that arrived together are recorded in one write.
			batch := []result{res}
		drain:
			for {
				select {
				case more := <-r.results:
					batch = append(batch, more)
				default:
					break drain
				}
			}
			r.settle(batch) // recorded by advance's write, before anything acts on it
		case <-lazy:
			lazy = nil
			if r.flush() != nil {
				return
			}
		case <-tick:
		}
	}
}

// flush writes every subtask changed since the last flush, and the
// proposals settled results carried, in one write, before anything acts
// on the change. A runner whose store refuses a write stops: what it holds
// in memory is no longer what a restart would read, so the store wins.
func (r *runner) flush() error {
	if len(r.dirty) == 0 && len(r.props) == 0 {
		return nil
	}
	var add func([]store.PlanEntry) ([]store.PlanEntry, error)
	if props := r.props; len(props) > 0 {
		add = func(l []store.PlanEntry) ([]store.PlanEntry, error) {
			var out []store.PlanEntry
			for _, p := range props {
				out = append(out, proposalEntries(append(l[:len(l):len(l)], out...), p.ps, p.sub, p.did)...)
			}
			return out, nil
		}
	}
	subs := make([]store.PlanSubtask, 0, len(r.dirty))
	for _, id := range r.order {
		if r.dirty[id] {
			subs = append(subs, *r.subs[id])
		}
	}
	if _, err := r.c.st.PutPlanSubtasks(r.id, subs, add); err != nil {
		if r.ctx.Err() == nil {
			r.c.log.Error("record subtasks", "plan", r.id, "err", err)
		}
		r.cancel()
		return err
	}
	clear(r.dirty)
	r.props = nil
	r.c.notify()
	return nil
}

func (r *runner) touch(s *store.PlanSubtask) { r.dirty[s.ID] = true }

// advance dispatches every ready step, in order, and ends the plan when it
// is over. again: a dispatch must be tried again after a pause.
func (r *runner) advance() (again, over bool) {
	done := 0
	for _, id := range r.order {
		s := r.subs[id]
		switch s.State {
		case SubDone:
			done++
		case SubFailed:
			last := s.Attempts[len(s.Attempts)-1]
			r.end(StateFailed, fmt.Sprintf("subtask %s failed after %d attempt(s): %s", id, len(s.Attempts), last.Reason))
			return false, true
		}
	}
	if done == len(r.order) {
		r.end(StateCompleted, "")
		return false, true
	}
	var ready []*store.PlanSubtask
	for _, id := range r.order {
		if s := r.subs[id]; s.State == SubPending && r.ready(id) {
			ready = append(ready, s)
		}
	}
	if len(ready) == 0 {
		return false, r.flush() != nil
	}
	again = r.dispatch(ready)
	if r.ctx.Err() != nil {
		return false, true
	}
	for _, s := range ready {
		if s.State == SubFailed {
			return r.advance()
		}
	}
	return again, false
}

func (r *runner) ready(id string) bool {
	for _, d := range r.deps(id) {
		if r.subs[d].State != SubDone {
			return false
		}
	}
	return true
}

// spent is what a step's earlier attempts used of its budget.
func spent(s *store.PlanSubtask) uint64 {
	var n uint64
	for _, a := range s.Attempts {
		n += a.Used
	}
	return n
}

func (r *runner) marker(s *store.PlanSubtask) protocol.ContextID {
	return protocol.ContextID(fmt.Sprintf("kith-plan/%s/%s/%d", r.id, s.ID, len(s.Attempts)+1))
}

// prepare records (in memory) the next attempt of a ready step and returns
// the request that makes it.
func (r *runner) prepare(s *store.PlanSubtask) (delegation.Request, error) {
	step, _ := r.spec.step(s.ID)
	budget := step.Budget - min(step.Budget, spent(s))
	if budget == 0 {
		return delegation.Request{}, errors.New("its budget is spent")
	}
	var exclude map[peer.ID]bool
	if !r.spec.Retry.SamePeer {
		exclude = excluded(*s, r.c.self)
	}
	t, err := r.c.choose(r.ctx, step, exclude)
	if err != nil {
		return delegation.Request{}, err
	}
	if t.maxBudget > 0 {
		budget = min(budget, t.maxBudget)
	}
	text, err := r.compose(s.ID, step)
	if err != nil {
		return delegation.Request{}, err
	}
	timeout := time.Duration(step.Timeout)
	if timeout == 0 {
		timeout = time.Duration(r.spec.Timeout)
	}
	a := store.PlanAttempt{Marker: r.marker(s), State: attemptDispatching, Budget: budget, StartedAt: r.now(), Local: t.local}
	if !t.local {
		a.Peer = t.peer
	}
	s.Attempts = append(s.Attempts, a)
	s.State = SubDispatching
	r.touch(s)
	return delegation.Request{
		Profile: step.Profile, Peer: t.peer, ContextID: a.Marker, BudgetTokens: budget, Timeout: timeout, Parent: r.id,
		Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart(text)}},
	}, nil
}

// dispatch makes the next attempt of each ready step: the attempts are
// recorded (with their markers) before the delegations are made, in
// parallel, and their delegation IDs as soon as the engine returns them.
// It reports whether some could not be made now (try again later).
func (r *runner) dispatch(ready []*store.PlanSubtask) (again bool) {
	type out struct {
		s   *store.PlanSubtask
		req delegation.Request
		did protocol.DelegationID
		err error
	}
	var outs []*out
	for _, s := range ready {
		req, err := r.prepare(s)
		if err != nil {
			r.failStep(s, err.Error())
			continue
		}
		outs = append(outs, &out{s: s, req: req})
	}
	if r.flush() != nil {
		return false
	}
	var wg sync.WaitGroup
	for _, o := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.did, o.err = r.c.eng.Delegate(r.ctx, o.req)
		}()
	}
	wg.Wait()
	var watch, recover []*store.PlanSubtask
	for _, o := range outs {
		s, did, err := o.s, o.did, o.err
		last := &s.Attempts[len(s.Attempts)-1]
		switch {
		case err != nil && did.IsZero() && (errors.Is(err, delegation.ErrNotRunning) || r.ctx.Err() != nil):
			// Nothing went out: the attempt stays recorded as dispatching
			// and is made again (here, or by a restarted coordinator).
			r.c.log.Debug("engine not taking delegations", "plan", r.id, "subtask", s.ID, "err", err)
			recover = append(recover, s)
		case err != nil && did.IsZero():
			last.State, last.Reason, last.EndedAt = protocol.StateFailed.String(), err.Error(), r.now()
			s.State = SubPending
			if !retryable(err) || len(s.Attempts) >= r.spec.Retry.Attempts {
				s.State = SubFailed
			} else {
				again = true // the next attempt after a pause
			}
			r.touch(s)
			r.c.log.Info("subtask dispatch failed", "plan", r.id, "subtask", s.ID, "attempt", len(s.Attempts), "err", err)
		default:
			last.Delegation, last.State = did, protocol.StateOffered.String()
			s.State = SubRunning
			r.touch(s)
			watch = append(watch, s)
			r.c.log.Info("subtask dispatched", "plan", r.id, "subtask", s.ID, "attempt", len(s.Attempts), "delegation", did, "peer", o.req.Peer)
		}
	}
	// The delegation IDs go out with the next write: until then the
	// attempts' markers find them, as after a crash.
	for _, s := range watch {
		r.watch(s)
	}
	if len(recover) > 0 && r.ctx.Err() == nil {
		for _, s := range recover {
			r.recoverDispatch(s)
		}
		again = r.flush() == nil
	}
	return again
}

// retryable: another attempt could succeed where this one failed.
func retryable(err error) bool {
	return !errors.Is(err, delegation.ErrTooLarge) && !errors.Is(err, delegation.ErrBadRequest)
}

func (r *runner) failStep(s *store.PlanSubtask, why string) {
	s.Attempts = append(s.Attempts, store.PlanAttempt{State: protocol.StateFailed.String(), Reason: why, StartedAt: r.now(), EndedAt: r.now()})
	s.State = SubFailed
	r.touch(s)
}

// recoverDispatch settles (in memory) an attempt recorded as dispatching:
// if its delegation was made (found by its marker among the plan's
// children), it is watched; otherwise nothing went out and the step is
// ready again.
func (r *runner) recoverDispatch(s *store.PlanSubtask) {
	last := &s.Attempts[len(s.Attempts)-1]
	parent := r.id
	kids, err := r.c.st.ListDelegations(store.DelegationFilter{Role: ptr(store.RoleRequester), Parent: &parent})
	if err != nil {
		r.c.log.Error("list plan delegations", "plan", r.id, "err", err)
	}
	r.touch(s)
	for _, d := range kids {
		if d.ContextID == last.Marker {
			last.Delegation, last.State = d.ID, d.State.String()
			s.State = SubRunning
			r.watch(s)
			return
		}
	}
	s.Attempts = s.Attempts[:len(s.Attempts)-1]
	s.State = SubPending
}

func ptr[T any](v T) *T { return &v }

// watch waits, in the background, for the delegation of s's last attempt
// to end, and reports it to the runner.
func (r *runner) watch(s *store.PlanSubtask) {
	sub, did := s.ID, s.Attempts[len(s.Attempts)-1].Delegation
	r.c.wg.Add(1)
	go func() {
		defer r.c.wg.Done()
		d, err := r.c.eng.Wait(r.ctx, did)
		if err != nil {
			if r.ctx.Err() != nil {
				return
			}
			// The engine no longer knows it: the attempt failed, and the
			// retry policy decides what comes next.
			r.c.log.Error("wait for subtask", "plan", r.id, "subtask", sub, "delegation", did, "err", err)
			d = store.Delegation{ID: did, State: protocol.StateFailed, Reason: err.Error()}
		}
		select {
		case r.results <- result{sub, d}:
		case <-r.ctx.Done():
		}
	}()
}

// settle notes (in memory) how steps' delegations ended: done, with the
// proposals their results carried, or failed and, under the retry policy,
// pending again for another provider. The next flush records it all in one
// write, before the plan advances on it.
func (r *runner) settle(batch []result) {
	for _, res := range batch {
		s := r.subs[res.sub]
		if s.State != SubRunning || len(s.Attempts) == 0 || s.Attempts[len(s.Attempts)-1].Delegation != res.d.ID {
			continue
		}
		d := res.d
		a := &s.Attempts[len(s.Attempts)-1]
		a.State, a.Reason, a.Used, a.EndedAt = d.State.String(), d.Reason, d.Usage.Total, r.now()
		if d.Remote {
			a.Peer, a.Local = d.Peer, false
		} else {
			a.Peer, a.Local = "", true
		}
		r.touch(s)
		if d.State == protocol.StateCompleted {
			s.State = SubDone
			if out, err := delegation.Result(d); err == nil && s.ID != AssembleID {
				ps, problems := Proposals(out.Output)
				if len(problems) > 0 {
					a.Reason = "proposals dropped: " + strings.Join(problems, "; ")
				}
				if len(ps) > 0 {
					r.props = append(r.props, proposed{s.ID, d.ID, ps})
				}
			}
			r.c.log.Info("subtask done", "plan", r.id, "subtask", s.ID, "delegation", d.ID)
			continue
		}
		s.State = SubPending
		if len(s.Attempts) >= r.spec.Retry.Attempts {
			s.State = SubFailed
		}
		r.c.log.Info("subtask attempt ended", "plan", r.id, "subtask", s.ID, "state", d.State, "reason", d.Reason, "attempt", len(s.Attempts), "next", s.State)
	}
}

// proposed is what one result proposed, waiting for the next flush.
type proposed struct {
	sub string
	did protocol.DelegationID
	ps  []Proposal
}

// output is a finished step's output, with its proposal blocks removed.
func (r *runner) output(id string) (string, error) {
	if o, ok := r.outputs[id]; ok {
		return o, nil
	}
	s := r.subs[id]
	if s.State != SubDone || len(s.Attempts) == 0 {
		return "", fmt.Errorf("subtask %s has no output", id)
	}
	d, err := r.c.eng.Get(s.Attempts[len(s.Attempts)-1].Delegation)
	if err != nil {
		return "", err
	}
	o := stripProposals(delegation.Output(d))
	r.outputs[id] = o
	return o, nil
}

// compose builds a step's task text: the decisions in force, then its
// text with {{outputs.ID}} filled in; the assemble step then receives
// every fragment, in dependency order.
func (r *runner) compose(id string, step *Step) (string, error) {
	var err error
	text := refRE.ReplaceAllStringFunc(step.Task, func(m string) string {
		ref := strings.TrimSpace(strings.Trim(m, "{}"))
		o, oerr := r.output(strings.TrimPrefix(ref, outRef))
		if oerr != nil && err == nil {
			err = oerr
		}
		return o
	})
	if err != nil {
		return "", err
	}
	if id == AssembleID {
		var b strings.Builder
		b.WriteString(text)
		for _, sid := range order(r.spec.Subtasks) {
			o, err := r.output(sid)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "\n\n--- fragment %s ---\n%s", sid, o)
		}
		text = strings.TrimLeft(b.String(), "\n")
	}
	ledger, err := r.c.st.PlanLedger(r.id)
	if err != nil {
		return "", err
	}
	return preamble(decisions(ledger)) + text, nil
}

// end records the plan's final state: delegations still out are
// cancelled, steps not done are marked cancelled (if they were out) or
// skipped.
func (r *runner) end(state, why string) {
	for _, id := range r.order {
		s := r.subs[id]
		switch s.State {
		case SubRunning:
			did := s.Attempts[len(s.Attempts)-1].Delegation
			if err := r.c.eng.Cancel(did, "plan "+state+": "+why); err != nil && !errors.Is(err, store.ErrTerminal) {
				r.c.log.Warn("cancel subtask", "plan", r.id, "subtask", id, "err", err)
			}
			s.State = SubCancelled
		case SubPending, SubDispatching:
			s.State = SubSkipped
		default:
			continue
		}
		r.touch(s)
	}
	if r.flush() != nil {
		return
	}
	if _, err := r.c.st.UpdatePlan(r.id, func(p *store.Plan) error {
		p.State, p.Reason = state, why
		return nil
	}); err != nil {
		r.c.log.Error("record plan end", "plan", r.id, "err", err)
		return
	}
	r.c.log.Info("plan ended", "plan", r.id, "state", state, "reason", why)
}
