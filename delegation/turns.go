package delegation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/internal/backoff"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Multi-turn delegations (protocol 1.3), the provider's side: an executor
// that returns a question (executor.Result.Input) ends its turn; the task
// logs and sends a status of state input_required carrying the question,
// gives back its slot and lease, and waits, bounded by its deadline, for
// the requester's continuation. An accepted continuation is logged (with
// the running status that acknowledges it) before the executor runs again
// with every turn so far. The requester's side (Reply) is further down.
//
//	running --question--> input_required --continuation--> running --> ... --> terminal

// Errors of Reply, each leaving the delegation as it was.
var (
	// ErrNotWaiting: the delegation is not waiting for input (it runs, or
	// it has ended).
	ErrNotWaiting = errors.New("delegation: not waiting for input")
	// ErrDeadlinePassed: the conversation's deadline, set by the first
	// offer, has passed.
	ErrDeadlinePassed = errors.New("delegation: the delegation's deadline has passed")
	// ErrBudgetSpent: the turns so far used the whole budget of the first
	// offer; there is nothing left to answer with.
	ErrBudgetSpent = errors.New("delegation: the delegation's token budget is spent")
)

// turnTag is the turn a status of t carries: 0 unless the offer is
// multi_turn.
func (t *task) turnTag() uint32 {
	if !t.offer.MultiTurn {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return max(t.turn, 1)
}

// input is the executor's input for the turn about to run: the offered task,
// the turns before it, and what they left of the budget.
func (t *task) input() executor.Task {
	in := taskInput(t.offer)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.turns) > 0 {
		in.Exchanges = slices.Clone(t.turns)
		in.BudgetTokens -= min(in.BudgetTokens, t.used.Completion)
	}
	return in
}

// totalUsage is what the whole conversation used, last the turn's included.
func (t *task) totalUsage(last executor.Usage) executor.Usage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return executor.Usage{
		Prompt:     t.used.Prompt + last.Prompt,
		Completion: t.used.Completion + last.Completion,
		Total:      t.used.Total + last.Total,
	}
}

// idle reports whether t waits for an answer.
func (t *task) idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiting
}

// watchLease cancels t as preempted if local work takes its VRAM back while
// a turn runs; the returned func stops watching.
func (e *providerHalf) watchLease(t *task) func() {
	if t.lease == nil {
		return func() {}
	}
	stop := make(chan struct{})
	l := t.lease
	go func() {
		select {
		case <-l.Revoked():
			t.cancel(&stopCause{protocol.StatePreempted, l.Reason()})
		case <-stop:
		}
	}()
	return func() { close(stop) }
}

// reacquire takes a remote-pool slot and the profile's VRAM again for a
// task's next turn. The task was admitted once, so it is never refused:
// it waits for them, bounded by ctx (the task's deadline).
func (e *providerHalf) reacquire(ctx context.Context, t *task) error {
	bo := backoff.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	slot := !t.remote
	for {
		if !slot {
			slot = e.takeSlot(t.requester, t.trust) == nil
		}
		if slot {
			l, rej := e.lease(t.profile, t.wire, !t.remote)
			if rej == nil {
				t.lease = l
				return nil
			}
			if rej.Reason != protocol.ReasonInsufficientVRAM || e.cfg.Ledger == nil {
				if t.remote {
					e.releaseSlot(t.requester, t.trust)
				}
				return &stopCause{protocol.StateFailed, rej.Reason.String() + ": " + rej.Detail}
			}
		}
		if !backoff.Sleep(ctx, bo.Next()) {
			if slot && t.remote {
				e.releaseSlot(t.requester, t.trust)
			}
			return context.Cause(ctx)
		}
	}
}

// pause ends a turn with the executor's question: output still pending,
// the executor's resume state (EventPaused) and the input_required status
// are stored in one write, the status sent, and the task waits for its
// answer. It returns once an answer is taken (t.turns holds it), or why the
// task cannot go on.
func (e *providerHalf) pause(ctx context.Context, t *task, res executor.Result, pending *pendingOutput) error {
	if !t.offer.MultiTurn {
		return &stopCause{protocol.StateFailed, ReasonInputUnsupported +
			": the executor asked for input, and the requester did not offer a multi-turn delegation (protocol 1.3)"}
	}
	t.mu.Lock()
	turn := max(t.turn, 1)
	used := executor.Usage{
		Prompt:     t.used.Prompt + res.Usage.Prompt,
		Completion: t.used.Completion + res.Usage.Completion,
		Total:      t.used.Total + res.Usage.Total,
	}
	t.mu.Unlock()
	switch {
	case turn >= protocol.MaxTurns:
		return &stopCause{protocol.StateFailed, fmt.Sprintf("the executor asked for input after %d turns, the most one delegation takes", turn)}
	case used.Completion >= t.offer.BudgetTokens:
		return &stopCause{protocol.StateFailed, fmt.Sprintf("the executor asked for input with the budget of %d tokens spent", t.offer.BudgetTokens)}
	}
	var evs []store.Event
	if pending.n > 0 {
		st := &protocol.DelegationStatus{ID: t.wire, State: protocol.StateRunning, Seq: t.nextSeq(),
			Partial: []protocol.Part{protocol.TextPart(pending.take())}, Turn: turn}
		b, err := protocol.EncodeMessage(st)
		if err != nil {
			return err
		}
		evs = append(evs, store.Event{Type: EventStatus, State: protocol.StateRunning, Data: b})
	}
	q := &protocol.DelegationStatus{ID: t.wire, State: protocol.StateInputRequired, Seq: t.nextSeq(), Turn: turn,
		Usage: protocol.Usage(used)}
	if res.Input.Question != "" {
		q.Partial = []protocol.Part{protocol.TextPart(res.Input.Question)}
	}
	b, err := protocol.EncodeMessage(q)
	if err != nil {
		return err
	}
	evs = append(evs,
		store.Event{Type: EventPaused, State: protocol.StateInputRequired, Data: res.Input.Resume},
		store.Event{Type: EventStatus, State: protocol.StateInputRequired, Data: b})

	// The answer may come as soon as the status is out: the task waits
	// from before it is sent.
	t.mu.Lock()
	t.turn, t.used, t.waiting = turn, used, true
	t.turns = append(t.turns, executor.Exchange{Question: res.Input.Question, Resume: res.Input.Resume})
	t.mu.Unlock()
	if err := e.logPause(t, evs); err != nil {
		t.mu.Lock()
		t.waiting = false
		t.turns = t.turns[:len(t.turns)-1]
		t.mu.Unlock()
		return err
	}
	return e.awaitAnswer(ctx, t)
}

// logPause stores a pause's events, moving the delegation to input_required,
// and sends the wire ones. A task still unstored (see openDelay) is stored
// now, with them.
func (e *providerHalf) logPause(t *task, evs []store.Event) error {
	t.logMu.Lock()
	defer t.logMu.Unlock()
	switch t.open {
	case openPending:
		t.record.State = protocol.StateInputRequired
		if open, _ := e.openTaskLocked(t, evs...); !open {
			return ErrNotRunning
		}
		return nil
	case openDone:
	default:
		return ErrNotRunning
	}
	last := len(evs) - 1
	if _, err := e.transitionAfter(t.role, t.id, evs[:last], protocol.StateInputRequired, evs[last], nil); err != nil {
		return &stopCause{protocol.StateFailed, ReasonStore + ": " + err.Error()}
	}
	t.logged = append(t.logged, evs...)
	for _, ev := range evs {
		if ev.Type != EventStatus {
			continue
		}
		if t.remote {
			e.traceEncoded(Sent, t.requester, ev.Data)
		}
		t.send(ev.Data)
	}
	return nil
}

// awaitAnswer blocks until an answer is taken or ctx ends (the deadline,
// a cancel, the engine stopping).
func (e *providerHalf) awaitAnswer(ctx context.Context, t *task) error {
	select {
	case <-t.answered:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// continueTask takes a continuation for t: it checks that t waits for this
// turn, within its deadline and budget, then stores the continuation and
// the running status that acknowledges it, sends the status and wakes the
// task. dup reports a continuation already taken (sent again after a
// reattach), which changes nothing. On a reject nothing changed.
func (e *providerHalf) continueTask(t *task, c *protocol.DelegationContinue, raw []byte) (dup bool, rej *RejectedError) {
	t.logMu.Lock()
	defer t.logMu.Unlock()
	t.mu.Lock()
	waiting, turn, used := t.waiting, max(t.turn, 1), t.used
	t.mu.Unlock()
	switch {
	case !t.offer.MultiTurn:
		return false, &RejectedError{protocol.ReasonNotWaiting, "the delegation was not offered multi-turn"}
	case !waiting && c.Turn == turn && turn >= 2:
		return true, nil
	case !waiting:
		return false, &RejectedError{protocol.ReasonNotWaiting, fmt.Sprintf("turn %d is running, no question is waiting", turn)}
	case c.Turn != turn+1:
		return false, &RejectedError{protocol.ReasonTurnOutOfOrder, fmt.Sprintf("turn %d answers turn %d's question; want turn %d", c.Turn, c.Turn-1, turn+1)}
	case !e.cfg.Now().Before(t.deadline):
		return false, &RejectedError{protocol.ReasonExpired, "the delegation's deadline has passed"}
	case used.Completion >= t.offer.BudgetTokens:
		return false, &RejectedError{protocol.ReasonBudgetTooLow, fmt.Sprintf("the conversation has used its budget of %d tokens", t.offer.BudgetTokens)}
	case protocol.PayloadSize(c.Task.Parts) > e.maxPayload:
		return false, &RejectedError{protocol.ReasonPayloadTooLarge, fmt.Sprintf("answer of %d bytes, this node carries at most %d", protocol.PayloadSize(c.Task.Parts), e.maxPayload)}
	}
	st := &protocol.DelegationStatus{ID: t.wire, State: protocol.StateRunning, Seq: t.nextSeq(), Turn: c.Turn}
	b, err := protocol.EncodeMessage(st)
	if err != nil {
		return false, &RejectedError{protocol.ReasonBusy, "could not encode the acknowledgement"}
	}
	turnEv := store.Event{Type: EventTurn, State: protocol.StateRunning, Data: raw}
	runEv := store.Event{Type: EventStatus, State: protocol.StateRunning, Data: b}
	if _, err := e.transitionAfter(t.role, t.id, []store.Event{turnEv}, protocol.StateRunning, runEv, nil); err != nil {
		if errors.Is(err, store.ErrTerminal) {
			return false, &RejectedError{protocol.ReasonNotWaiting, "the delegation has ended"}
		}
		e.log.Error("store continuation", "delegation", t.id, "err", err)
		return false, &RejectedError{protocol.ReasonBusy, "could not store the answer; send it again"}
	}
	t.logged = append(t.logged, turnEv, runEv)
	answer := taskInput(&protocol.DelegationOffer{Task: c.Task})
	t.mu.Lock()
	t.waiting, t.turn = false, c.Turn
	last := &t.turns[len(t.turns)-1]
	last.Answer, last.AnswerData = answer.Text, answer.Data
	t.mu.Unlock()
	if t.remote {
		e.trace(Sent, t.requester, st)
	}
	t.send(b)
	select {
	case t.answered <- struct{}{}:
	default:
	}
	return false, nil
}

// serveContinue answers a continuation that opens a stream: taken, the
// stream becomes the task's (as a reattach); refused, a typed reject. A
// peer that has no delegation of that ID (another peer may) hears
// unknown_delegation, so that IDs cannot be probed.
func (e *providerHalf) serveContinue(ctx context.Context, c *protocol.Conn, remote peer.ID, m *protocol.DelegationContinue, raw []byte) {
	key, found := e.providerKey(remote, m.ID)
	if !found {
		e.reject(c, remote, m.ID, &RejectedError{protocol.ReasonUnknownDelegation, "no delegation of this peer has that ID here"})
		return
	}
	e.settle(ctx, key)
	e.provMu.Lock()
	t := e.running[key]
	e.provMu.Unlock()
	if t == nil || t.role != store.RoleProvider {
		detail := "the delegation has ended"
		if d, err := e.st.DelegationInfo(store.RoleProvider, key); err == nil {
			detail = "the delegation is " + d.State.String()
		}
		e.reject(c, remote, m.ID, &RejectedError{protocol.ReasonNotWaiting, detail})
		return
	}
	if _, rej := e.continueTask(t, m, raw); rej != nil {
		e.reject(c, remote, m.ID, rej)
		return
	}
	e.serveReattach(ctx, c, remote, &protocol.DelegationStatus{ID: m.ID, Query: true})
}

// resumeWaiting brings back, at start, a delegation that was waiting for
// input: its conversation is read back from its log, and it waits on.
func (e *providerHalf) resumeWaiting(info store.Delegation) error {
	d, err := e.st.GetDelegation(info.Role, info.ID)
	if err != nil {
		return err
	}
	m, err := protocol.DecodeMessage(d.Offer)
	if err != nil {
		return err
	}
	o, ok := m.(*protocol.DelegationOffer)
	if !ok || !o.MultiTurn {
		return errors.New("the stored offer is not a multi-turn offer")
	}
	p, ok := e.profile(o.Profile)
	if !ok {
		return fmt.Errorf("profile %q is gone", o.Profile)
	}
	events, err := e.st.Events(d.Role, d.ID, 0)
	if err != nil {
		return err
	}
	requester, remote := d.Peer, d.Role == store.RoleProvider
	if !remote {
		requester = e.id.PeerID()
	}
	t := &task{
		id: d.ID, wire: o.ID, role: d.Role, requester: requester, trust: e.trustOf(requester), offer: o,
		offerHash: digestOf(e.proofDigest(o), d.Offer), profile: p, deadline: d.Deadline, remote: remote,
		done: make(chan struct{}), answered: make(chan struct{}, 1), resumed: true, waiting: true,
		logged: events,
	}
	var resume []byte
	for _, ev := range events {
		switch ev.Type {
		case EventPaused:
			resume = ev.Data
		case EventStatus:
			m, err := protocol.DecodeMessage(ev.Data)
			if err != nil {
				return err
			}
			st := m.(*protocol.DelegationStatus)
			t.statusSeq = max(t.statusSeq, st.Seq)
			if st.State == protocol.StateInputRequired {
				t.turn = st.Turn
				t.used = executor.Usage(st.Usage)
				t.turns = append(t.turns, executor.Exchange{Question: partsText(st.Partial), Resume: resume})
				resume = nil
			}
		case EventTurn:
			m, err := protocol.DecodeMessage(ev.Data)
			if err != nil {
				return err
			}
			c, ok := m.(*protocol.DelegationContinue)
			if !ok || len(t.turns) == 0 {
				return errors.New("a turn in the log is not a continuation")
			}
			in := taskInput(&protocol.DelegationOffer{Task: c.Task})
			last := &t.turns[len(t.turns)-1]
			last.Answer, last.AnswerData = in.Text, in.Data
		}
	}
	if len(t.turns) == 0 || t.turns[len(t.turns)-1].Answer != "" {
		return errors.New("the log holds no question waiting for an answer")
	}
	e.runMu.Lock()
	ctx := e.runCtx
	e.runMu.Unlock()
	e.log.Info("delegation waits on for input after restart", "delegation", d.ID, "turn", t.turn)
	e.startTask(ctx, t)
	return nil
}

// proofTurns is the turns field of a result proof over events: the number
// of turns when more than one, else 0.
func proofTurns(events []store.Event) uint32 {
	n := uint32(0)
	for _, ev := range currentAttempt(events) {
		if ev.Type == EventTurn {
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return n + 1
}

// Reply answers the question of a delegation this node requested that waits
// for input (state input_required): the answer is stored, then sent to the
// provider as a continuation of the same delegation, on the live stream or
// on the next one. It returns once the answer is durable. A delegation that
// does not wait, has passed its deadline or spent its budget is refused
// with ErrNotWaiting, ErrDeadlinePassed or ErrBudgetSpent, and nothing
// changes.
func (e *requesterHalf) Reply(ctx context.Context, id protocol.DelegationID, answer protocol.Task) error {
	if answer.Role == "" {
		answer.Role = "user"
	}
	if len(answer.Parts) == 0 {
		return fmt.Errorf("%w: an answer needs at least one part", ErrBadRequest)
	}
	if n := protocol.PayloadSize(answer.Parts); n > e.maxPayload {
		return fmt.Errorf("%w: %d bytes of content, this node carries at most %d", ErrTooLarge, n, e.maxPayload)
	}
	select {
	case <-e.recovered:
	case <-ctx.Done():
		return ctx.Err()
	}
	d, err := e.st.DelegationInfo(store.RoleRequester, id)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrUnknown, id)
	}
	if !d.Remote {
		return e.replyLocal(id, answer)
	}
	e.reqMu.Lock()
	o := e.outgoing[id]
	e.reqMu.Unlock()
	if o == nil {
		if d.State == protocol.StateInputRequired {
			return ErrNotRunning
		}
		return fmt.Errorf("%w: delegation %s is %s", ErrNotWaiting, id, d.State)
	}
	o.replyMu.Lock()
	defer o.replyMu.Unlock()
	_, raw, err := e.continuation(id, answer)
	if err != nil {
		return err
	}
	e.reqMu.Lock()
	r, conn := o.reader, o.conn
	e.reqMu.Unlock()
	if r != nil {
		if err := r.buf.flush(); err != nil {
			return err
		}
	}
	ev := store.Event{Type: EventTurn, State: protocol.StateRunning, Data: raw}
	if _, err := e.transition(store.RoleRequester, id, protocol.StateRunning, ev, nil); err != nil {
		if errors.Is(err, store.ErrTerminal) {
			return fmt.Errorf("%w: delegation %s has ended", ErrNotWaiting, id)
		}
		return err
	}
	if r != nil {
		r.own(ev)
	}
	if conn != nil {
		if err := conn.SendEncoded(raw); err == nil {
			e.traceEncoded(Sent, d.Peer, raw)
		}
		// A send that fails ends the stream; the next one carries the
		// answer (attempt).
	}
	return nil
}

// continuation checks that delegation id waits for input, within its
// deadline and budget, and builds the continuation that answers it.
func (e *requesterHalf) continuation(id protocol.DelegationID, answer protocol.Task) (*protocol.DelegationContinue, []byte, error) {
	d, err := e.st.GetDelegation(store.RoleRequester, id)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s", ErrUnknown, id)
	}
	if d.State != protocol.StateInputRequired {
		return nil, nil, fmt.Errorf("%w: delegation %s is %s", ErrNotWaiting, id, d.State)
	}
	deadline := d.Deadline
	if d.Remote {
		deadline = deadline.Add(-requestGrace) // the provider's, give or take the offer's flight
	}
	if !e.cfg.Now().Before(deadline) {
		return nil, nil, fmt.Errorf("%w: %s", ErrDeadlinePassed, deadline.UTC().Format(time.RFC3339))
	}
	if m, err := protocol.DecodeMessage(d.Offer); err != nil {
		return nil, nil, err
	} else if o, ok := m.(*protocol.DelegationOffer); !ok || !o.MultiTurn {
		return nil, nil, fmt.Errorf("%w: the provider asked for input on a delegation not offered multi-turn (it speaks no protocol %s)", ErrNotWaiting, protocol.MultiTurn)
	}
	events, err := e.st.Events(store.RoleRequester, id, 0)
	if err != nil {
		return nil, nil, err
	}
	var q *protocol.DelegationStatus
	for _, ev := range slices.Backward(currentAttempt(events)) {
		if ev.Type == EventStatus && ev.State == protocol.StateInputRequired {
			if m, err := protocol.DecodeMessage(ev.Data); err == nil {
				q, _ = m.(*protocol.DelegationStatus)
			}
			break
		}
	}
	switch {
	case q == nil:
		return nil, nil, fmt.Errorf("%w: no question in the log of %s", ErrNotWaiting, id)
	case q.Usage.Completion >= d.BudgetTokens:
		return nil, nil, fmt.Errorf("%w: %d of %d tokens used", ErrBudgetSpent, q.Usage.Completion, d.BudgetTokens)
	case q.Turn+1 > protocol.MaxTurns:
		return nil, nil, fmt.Errorf("%w: a delegation takes at most %d turns", ErrBadRequest, protocol.MaxTurns)
	}
	c := &protocol.DelegationContinue{ID: id, Turn: max(q.Turn, 1) + 1, Task: answer}
	raw, err := protocol.EncodeMessage(c)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return c, raw, nil
}

// replyLocal answers a local delegation: the task runs here, so the answer
// goes to it directly, through the provider's own checks.
func (e *requesterHalf) replyLocal(id protocol.DelegationID, answer protocol.Task) error {
	c, raw, err := e.continuation(id, answer)
	if err != nil {
		return err
	}
	e.prov.provMu.Lock()
	t := e.prov.running[id]
	e.prov.provMu.Unlock()
	if t == nil || t.role != store.RoleRequester {
		return fmt.Errorf("%w: delegation %s is not running here", ErrNotWaiting, id)
	}
	if _, rej := e.prov.continueTask(t, c, raw); rej != nil {
		return replyError(rej)
	}
	return nil
}

// replyError maps a provider's refusal of an answer to Reply's errors.
func replyError(rej *RejectedError) error {
	switch rej.Reason {
	case protocol.ReasonNotWaiting, protocol.ReasonTurnOutOfOrder, protocol.ReasonUnknownDelegation:
		return fmt.Errorf("%w: %s", ErrNotWaiting, rej.Detail)
	case protocol.ReasonExpired:
		return fmt.Errorf("%w: %s", ErrDeadlinePassed, rej.Detail)
	case protocol.ReasonBudgetTooLow:
		return fmt.Errorf("%w: %s", ErrBudgetSpent, rej.Detail)
	}
	return rej
}

// pendingTurn is the continuation a requester logged that its provider has
// not acknowledged (no status after it), to send again on a new stream; nil
// if none.
func pendingTurn(events []store.Event) []byte {
	for _, ev := range slices.Backward(events) {
		switch ev.Type {
		case EventTurn:
			return ev.Data
		case EventStatus, EventAccepted:
			return nil
		}
	}
	return nil
}

// Question is what a delegation this node requested waits on: the
// provider's question, the turn it ends and the usage so far.
type Question struct {
	Text  string
	Parts []protocol.Part
	Turn  uint32
	Usage protocol.Usage
}

// Question returns the question a delegation this node requested waits on;
// ErrNotWaiting when it does not wait for input.
func (e *core) Question(id protocol.DelegationID) (Question, error) {
	d, err := e.st.DelegationInfo(store.RoleRequester, id)
	if err != nil {
		return Question{}, fmt.Errorf("%w: %s", ErrUnknown, id)
	}
	if d.State != protocol.StateInputRequired {
		return Question{}, fmt.Errorf("%w: delegation %s is %s", ErrNotWaiting, id, d.State)
	}
	events, err := e.st.Events(store.RoleRequester, id, 0)
	if err != nil {
		return Question{}, err
	}
	for _, ev := range slices.Backward(events) {
		if ev.Type == EventStatus && ev.State == protocol.StateInputRequired {
			m, err := protocol.DecodeMessage(ev.Data)
			if err != nil {
				return Question{}, err
			}
			st := m.(*protocol.DelegationStatus)
			return Question{Text: partsText(st.Partial), Parts: st.Partial, Turn: max(st.Turn, 1), Usage: st.Usage}, nil
		}
	}
	return Question{}, fmt.Errorf("%w: no question in the log of %s", ErrNotWaiting, id)
}
