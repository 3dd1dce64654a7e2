package delegation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Running a task, the provider's side: its record opened (written, and its
// accept sent, once it has run openDelay or sends something), the executor
// run with its output streamed, and the signed result stored and sent
// (finish).

// openDelay is how long a remote task may run before its record is
// written and its accept sent. A task that ends sooner is stored once, its
// accept and result together, so that a short delegation costs the
// provider one durable write on its critical path, not two. The price: a
// task that was running, unacknowledged, when the node crashed is run again
// when the requester re-offers it, as any offer it never saw accepted.
const openDelay = 10 * time.Millisecond

// openTask writes a pending task's record, its opening events and extra in
// one write, then sends them. It reports whether the task is open (already,
// or now), and whether extra went out with the opening; when the write
// fails the task is cancelled.
func (e *providerHalf) openTask(t *task, extra ...store.Event) (open, stored bool) {
	t.logMu.Lock()
	defer t.logMu.Unlock()
	return e.openTaskLocked(t, extra...)
}

// openTaskLocked is openTask with t.logMu held.
func (e *providerHalf) openTaskLocked(t *task, extra ...store.Event) (open, stored bool) {
	switch t.open {
	case openDone:
		return true, false
	case openFailed, openMerged:
		return false, false
	}
	if t.openTimer != nil {
		t.openTimer.Stop()
	}
	evs := slices.Concat(t.openEvs, extra)
	if err := e.create(t.record, evs...); err != nil {
		t.open = openFailed
		e.log.Error("store offer", "delegation", t.id, "err", err)
		t.cancel(&stopCause{protocol.StateFailed, ReasonStore + ": " + err.Error()})
		t.abort()
		return false, false
	}
	t.open = openDone
	t.logged = append(t.logged, evs...)
	e.publishNew(t.role, t.id, 1, evs)
	out := make([][]byte, 0, len(evs))
	for _, ev := range evs {
		if ev.Type != EventAccepted && ev.Type != EventStatus {
			continue // this node's own notes (EventPaused)
		}
		e.traceEncoded(Sent, t.requester, ev.Data)
		out = append(out, ev.Data)
	}
	t.send(out...)
	return true, true
}

// startTask runs t in the background: in the remote pool when it holds a
// slot, directly when it is local work.
func (e *providerHalf) startTask(ctx context.Context, t *task) {
	e.provMu.Lock()
	e.running[t.id] = t
	e.provMu.Unlock()
	taskCtx, cancel := context.WithCancelCause(withParent(ctx, t))
	t.cancel = cancel
	if t.answered == nil {
		t.answered = make(chan struct{}, 1)
	}
	if t.open == openPending {
		t.logMu.Lock()
		t.openTimer = time.AfterFunc(e.openDelay, func() { _, _ = e.openTask(t) })
		t.logMu.Unlock()
	}
	e.wg.Add(1)
	e.workers.run(ctx, &e.wg, func() {
		defer e.wg.Done()
		defer cancel(nil)
		e.runTask(taskCtx, t)
	})
}

// cancelTask stops a running task on its requester's word; id is the
// requester's name for it.
func (e *providerHalf) cancelTask(remote peer.ID, id protocol.DelegationID, reason string) {
	key, found := e.providerKey(remote, id)
	if !found {
		return
	}
	e.provMu.Lock()
	t := e.running[key]
	e.provMu.Unlock()
	if t == nil || t.requester != remote {
		return
	}
	if reason == "" {
		reason = "cancelled by requester"
	}
	t.cancel(&stopCause{protocol.StateCancelled, reason})
}

// flushInterval coalesces streamed output: one durable status per interval
// instead of one per token.
const flushInterval = 100 * time.Millisecond

// providerFlushBytes is the most output one status carries: as much as a
// message can. Output is streamed every flushInterval, so this bound only
// caps one status of a fast executor, and output that a task produces
// within one interval goes out once, in its result, rather than in
// statuses and then again in the result (a 1 MiB echo was sent, stored and
// hashed twice on each side; with 8 MiB here, so was most of a 16 MiB
// one). Pending output holds the executor's own strings (pendingOutput),
// so waiting for the interval costs no copy. Pending output is sent early
// only when the next update would take it past the bound, so output of
// exactly the bound still goes out once: flushing once it reached the
// bound sent a fast 64 MiB output twice, first as a status (which both
// stores keep inline in their logs, not in files of their own), then in
// the result, and such a delegation took 1.5–1.9 s against 0.43 s for a
// 63 MiB one (docs/performance.md).
const providerFlushBytes = protocol.MaxPayload

func (e *providerHalf) runTask(ctx context.Context, t *task) {
	// The slot and the lease go back as soon as the executor returns: a
	// requester that offers its next task the moment this result reaches
	// it finds the slot free. A task that asks for input holds neither
	// while it waits, and takes them again for its next turn.
	held := !t.resumed
	release := func() {
		if !held {
			return
		}
		held = false
		if t.remote {
			e.releaseSlot(t.requester, t.trust)
		}
		t.releaseLease()
	}
	defer func() {
		e.provMu.Lock()
		delete(e.running, t.id)
		e.provMu.Unlock()
		release()
		if t.remote {
			e.st.DropStaged(t.role, t.id) // its offer's file, if never stored
		}
		close(t.done)
	}()
	ctx, cancelDeadline := context.WithDeadlineCause(ctx, t.deadline, &stopCause{protocol.StateExpired, ReasonTimeout})
	defer cancelDeadline()
	started := e.cfg.Now()

	stream := &outputStream{statusCap: e.statusCap, last: time.Now(), send: func(text string, permille uint32) {
		st := &protocol.DelegationStatus{ID: t.wire, State: protocol.StateRunning, Seq: t.nextSeq(),
			ProgressPermille: permille, Turn: t.turnTag()}
		if text != "" {
			st.Partial = []protocol.Part{protocol.TextPart(text)}
		}
		_ = e.emitStatus(t, st)
	}}
	// Between turns and once the executor has returned, only this
	// goroutine touches stream.pending.
	pending := &stream.pending
	var res executor.Result
	var err error
	if t.resumed {
		if err = e.awaitAnswer(ctx, t); err == nil {
			err = e.reacquire(ctx, t)
			held = err == nil
		}
	}
	for err == nil {
		stopWatch := e.watchLease(t)
		in := t.input()
		e.contextInput(t, &in) // contexts: the history (context.go)
		stream.start()
		res, err = t.profile.Executor.Execute(ctx, in, stream.emit)
		stream.stop()
		stopWatch()
		release()
		if err != nil || res.Input == nil {
			break
		}
		// A question: the turn ends, the task waits for the answer
		// holding nothing, then runs its next turn.
		if err = e.pause(ctx, t, res, pending); err != nil {
			break
		}
		if err = e.reacquire(ctx, t); err != nil {
			break
		}
		held = true
		res = executor.Result{}
	}
	if t.idle() && e.stopping() {
		// Shut down while waiting for an answer: nothing runs, so nothing
		// is lost. The task stays input_required in the store and the next
		// run waits on (recoverProvider).
		return
	}
	res.Usage = t.totalUsage(res.Usage)
	// Output still pending goes out with the result, in the same durable
	// write: a fast task costs one write after its accept, not two. Its
	// status is numbered now, before any other, and built below unless
	// the result carries the same output anyway.
	var tail []store.Event
	var pendingSeq uint64
	if pending.n > 0 {
		pendingSeq = t.nextSeq()
	}

	state, reason, detail := protocol.StateCompleted, "", ""
	if errors.Is(err, executor.ErrBudgetExceeded) {
		// The backend overran the budget and said so: report the usage
		// honestly (the requester records the violation), keep the output.
		err, reason = nil, "backend reported usage above the budget"
	}
	if err != nil {
		state = protocol.StateFailed
		var sc *stopCause
		switch {
		case errors.As(context.Cause(ctx), &sc), errors.As(err, &sc):
			state, reason = sc.state, sc.reason
		case e.stopping():
			reason = ReasonProviderShutdown
		default:
			// An executor's error names local commands, paths and URLs:
			// the peer gets the rule, this node's log and store the detail.
			reason = ReasonExecutor + ": " + peerMessage(err)
			detail = ReasonExecutor + ": " + err.Error()
			e.log.Warn("executor failed", "delegation", t.id, "profile", t.profile.Name, "err", err)
		}
	}
	usage := protocol.Usage{Prompt: res.Usage.Prompt, Completion: res.Usage.Completion, Total: res.Usage.Total}
	out := []protocol.Part{}
	if res.Text != "" {
		out = append(out, protocol.TextPart(res.Text))
	}
	if n, limit := protocol.PayloadSize(out), e.outputCap(t.offer.BudgetTokens); n > limit {
		state, reason, out = protocol.StateFailed, fmt.Sprintf("%s: output of %d bytes, at most %d for this budget", ReasonPayloadTooLarge, n, limit), []protocol.Part{}
	}
	if !t.remote && detail != "" {
		reason, detail = detail, "" // local work: this node is the requester
	}
	if res.StoppedAtBudget && reason == "" {
		reason = "stopped at token budget"
	}
	if state == protocol.StatePreempted {
		// The requester hears of the preemption as a status first, so that
		// it can re-offer the task at once (DESIGN.md).
		st := &protocol.DelegationStatus{ID: t.wire, State: protocol.StatePreempted, Seq: t.nextSeq(), Reason: reason, Turn: t.turnTag()}
		if b, err := protocol.EncodeMessage(st); err == nil {
			tail = append(tail, store.Event{Type: EventStatus, State: protocol.StatePreempted, Data: b})
		}
	}
	e.keepTurn(t, state, out) // contexts: before the result is stored and sent (context.go)
	f := finishing{role: t.role, id: t.id, wire: t.wire, requester: t.requester, offerHash: t.offerHash,
		provisional: t.remote && t.offer != nil && t.offer.ProvisionalResult}
	t.logMu.Lock()
	switch t.open {
	case openFailed:
		t.logMu.Unlock()
		return // nothing stored, nothing sent: the requester offers again
	case openPending:
		// Done before its record was written: store it once, with the
		// result. The result holds the whole output, so output not yet
		// streamed is not sent twice.
		t.open = openMerged
		if t.openTimer != nil {
			t.openTimer.Stop()
		}
		rec := t.record
		f.create, f.abort = &rec, t.abort
		f.logged = t.openEvs
		if state == protocol.StateCompleted && len(out) > 0 {
			*pending = pendingOutput{}
		}
	default:
		f.logged = t.logged
	}
	t.logMu.Unlock()
	if pending.n > 0 {
		st := &protocol.DelegationStatus{ID: t.wire, State: protocol.StateRunning, Seq: pendingSeq,
			Partial: []protocol.Part{protocol.TextPart(pending.take())}, Turn: t.turnTag()}
		if b, err := protocol.EncodeMessage(st); err == nil {
			tail = append([]store.Event{{Type: EventStatus, State: protocol.StateRunning, Data: b}}, tail...)
		}
	}
	e.finish(f, state, outcomeReason{reason, detail}, out, usage, e.cfg.Now().Sub(started), tail, t.send)
}

// outputStream coalesces a task's streamed output and progress into
// statuses: at most one every flushInterval, the first an interval after
// the task began, so that a task done within it sends its output once, in
// its result. What is held back goes out at the latest flushInterval after
// the status before it (or the task's start), whether or not the executor
// emits again: waiting for its next update held back the line of a
// handler that printed it and then worked for minutes, for all that time.
//
// emit runs on the executor's goroutine and the timer's send on one of its
// own, one at a time (mu); between start and stop only. Outside them the
// task's goroutine has pending to itself.
type outputStream struct {
	statusCap int
	// send sends a running status with text (if any) and the progress so
	// far in permille (0: none reported).
	send func(text string, permille uint32)

	mu       sync.Mutex
	pending  pendingOutput
	progress uint32      // the latest progress reported, in permille
	moved    bool        // progress changed since the last status
	last     time.Time   // the last status sent, or the task's start
	on       bool        // between start and stop
	timer    *time.Timer // armed while something waits, nil otherwise
	gen      uint64      // which arming a firing timer belongs to
}

// start lets emit and the timer send, as the executor begins a turn.
func (s *outputStream) start() {
	s.mu.Lock()
	s.on = true
	s.mu.Unlock()
}

// stop ends sending once the executor has returned: a send under way
// finishes first, and output still pending stays in pending (progress not
// yet sent is dropped: what ends the turn says more).
func (s *outputStream) stop() {
	s.mu.Lock()
	s.on, s.moved = false, false
	s.disarm()
	s.mu.Unlock()
}

func (s *outputStream) emit(u executor.Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.on {
		return // after Execute returned: an executor that broke its contract
	}
	if s.pending.n > 0 && s.pending.n+len(u.Text) > s.statusCap {
		s.flush()
	}
	s.pending.add(u.Text)
	if p, ok := permille(u.Progress); ok && p != s.progress {
		s.progress, s.moved = p, true
	}
	if s.pending.n == 0 && !s.moved {
		return
	}
	wait := flushInterval - time.Since(s.last)
	if wait <= 0 {
		s.flush()
		return
	}
	if s.timer == nil {
		s.gen++
		gen := s.gen
		s.timer = time.AfterFunc(wait, func() { s.fire(gen) })
	}
}

// permille is an Update's progress in permille; false for -1 (the
// executor cannot tell) or anything else outside [0, 1].
func permille(progress float64) (uint32, bool) {
	if !(progress >= 0 && progress <= 1) {
		return 0, false
	}
	return uint32(math.Round(progress * protocol.MaxProgressPermille)), true
}

// fire sends what waits, unless the arming it belongs to was undone.
func (s *outputStream) fire(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen || !s.on {
		return
	}
	s.timer = nil
	s.flush()
}

// flush sends what waits as one status; s.mu is held.
func (s *outputStream) flush() {
	s.disarm()
	if s.pending.n == 0 && !s.moved {
		return
	}
	s.last, s.moved = time.Now(), false
	s.send(s.pending.take(), s.progress)
}

// disarm stops the timer; one already firing sees a new gen and does
// nothing. s.mu is held.
func (s *outputStream) disarm() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
		s.gen++
	}
}

// pendingOutput is output the executor emitted that has not gone out yet.
// Updates of pendingPartMin bytes or more are kept as the executor's own
// strings, smaller ones joined as they come, so that output is copied
// once, when it goes out, and not at all when the result carries it
// instead (a fast task).
type pendingOutput struct {
	parts []string
	small []byte // small updates since the last part
	n     int    // bytes pending
}

const pendingPartMin = 512

func (p *pendingOutput) add(s string) {
	p.n += len(s)
	if len(s) < pendingPartMin {
		p.small = append(p.small, s...)
		return
	}
	if len(p.small) > 0 {
		p.parts = append(p.parts, string(p.small))
		p.small = p.small[:0]
	}
	p.parts = append(p.parts, s)
}

// take returns the pending output and empties p.
func (p *pendingOutput) take() string {
	if len(p.small) > 0 {
		p.parts = append(p.parts, string(p.small))
		p.small = p.small[:0]
	}
	s := strings.Join(p.parts, "")
	clear(p.parts)
	p.parts, p.n = p.parts[:0], 0
	return s
}

// finishing names the delegation finish ends. id is where the store keeps
// it, wire what the requester calls it (the same but for a foreign ID, see
// providerKey); logged is what its log holds so far. create, when set, is
// the record of a task not yet stored, whose events are logged: finish
// writes it with them and the result, in one write, and sends them first.
type finishing struct {
	role      store.Role
	id, wire  protocol.DelegationID
	requester peer.ID
	offerHash *digest
	logged    []store.Event
	create    *store.Delegation
	abort     func() // ends the requester's stream when create cannot be stored
	// provisional: the offer asked for provisional results (1.5), so the
	// result is followed by a confirmation once it is stored.
	provisional bool
}

// aheadMin is the output from which a result is encoded before its proof
// is signed (encodeAhead).
const aheadMin = 256 << 10

// encodeAhead encodes a large result before its proof (p, all but its
// digests) is signed, with room for the proof (protocol.ResultAhead), and
// stages its file (store.StageResultAhead): the bytes before the proof are
// written while the output and the offer are hashed, where the write began
// only after them and the encoding. It returns nil, and a complete that
// does nothing, for a smaller result, one the test hook mutates, or one it
// cannot encode so (encoded the usual way then, after signing).
func (e *providerHalf) encodeAhead(role store.Role, id protocol.DelegationID, res *protocol.DelegationResult, p protocol.ResultProof) (*protocol.ResultAhead, func(bool)) {
	none := func(bool) {}
	if e.mutateResult != nil || protocol.PayloadSize(res.Output) < aheadMin {
		return nil, none
	}
	n, err := protocol.ResultProofLen(p)
	if err != nil {
		return nil, none
	}
	a, err := protocol.EncodeResultAhead(res, n)
	if err != nil {
		return nil, none
	}
	return a, e.st.StageResultAhead(role, id, a.Bytes(), a.ProofAt())
}

// emitStatus persists a status (streamed output) and then sends it; the
// first one of a pending task goes out with its opening, in one write.
func (e *providerHalf) emitStatus(t *task, st *protocol.DelegationStatus) error {
	raw, err := protocol.EncodeMessage(st)
	if err != nil {
		return err
	}
	ev := store.Event{Type: EventStatus, State: st.State, Data: raw}
	switch open, stored := e.openTask(t, ev); {
	case stored:
		return nil
	case !open:
		return ErrNotRunning // the opening failed: the task is being cancelled
	}
	t.logMu.Lock()
	defer t.logMu.Unlock()
	if err := e.appendEvent(t.role, t.id, ev); err != nil {
		return err
	}
	t.logged = append(t.logged, ev)
	if t.remote {
		e.trace(Sent, t.requester, st)
	}
	t.send(raw)
	return nil
}

// peerMessage is what a requester may hear of an executor's failure: what
// a handler chose to tell (executor.Tell), the typed reason a child
// delegation was rejected with, or nothing more than that it failed.
func peerMessage(err error) string {
	if m := executor.PeerMessage(err); m != "" {
		return m
	}
	var rej *RejectedError
	if errors.As(err, &rej) {
		return "a child delegation was rejected: " + rej.Reason.String()
	}
	return "the profile's executor failed (details are in the provider's log)"
}

// outcomeReason is why a delegation ended: wire is what the requester is
// told, local (when set) what this node's store records instead.
type outcomeReason struct{ wire, local string }

// finish signs and stores the result, with tail (statuses not yet stored
// or sent) in the same write, then sends tail and the result through
// deliver. The first terminal state wins: if the delegation already ended,
// nothing is sent from here.
func (e *providerHalf) finish(f finishing, state protocol.State, why outcomeReason, out []protocol.Part, usage protocol.Usage,
	took time.Duration, tail []store.Event, deliver func(...[]byte)) {
	role, id, requester := f.role, f.id, f.requester
	reason := why.wire
	events := slices.Concat(f.logged, tail)
	alg := f.offerHash.alg
	p := protocol.ResultProof{
		DelegationID: f.wire, Requester: requester, Provider: e.id.PeerID(), Digest: alg,
		TranscriptHash: transcriptHash(alg, events),
		Usage:          usage, CompletedAt: e.cfg.Now(), State: state, Turns: proofTurns(events),
	}
	res := &protocol.DelegationResult{ID: f.wire, State: state, Output: out, Usage: usage, Duration: took, Reason: reason}
	ahead, complete := e.encodeAhead(role, id, res, p)
	defer complete(false) // on every path; after complete(true) below, too late to count
	// The output is hashed first: a large offer's hash is still running
	// beside it (digestOf), and the two take a core each instead of one
	// after the other.
	p.OutputHash = protocol.OutputDigest(alg, out)
	p.OfferHash = f.offerHash.get()
	proof, err := protocol.SignResultProof(e.id, p)
	if err != nil {
		e.log.Error("sign result proof", "delegation", id, "err", err)
		return
	}
	res.Proof = proof
	var raw []byte
	if ahead != nil && ahead.SetProof(proof) {
		raw = ahead.Bytes()
		complete(true)
	} else {
		complete(false)
		if e.mutateResult != nil {
			e.mutateResult(res)
		}
		if raw, err = protocol.EncodeMessage(res); err != nil {
			e.log.Error("encode result", "delegation", id, "err", err)
			return
		}
	}
	resultEv := store.Event{Type: EventResult, State: state}
	// To an offer that asked for provisional results (1.5), the result is
	// followed by the confirmation that it is stored.
	var stored []byte
	if f.provisional {
		if stored, err = storedConfirmation(f.wire, state); err != nil {
			e.log.Error("encode stored status", "delegation", id, "err", err)
			return
		}
	}
	if f.create != nil {
		// A fast task's record is written once, here, and on a store that
		// syncs, an offer that asked for provisional results gets its
		// accept, statuses and result while the write syncs, and the
		// confirmation once it is durable: the provider's sync overlaps
		// the result's trip and the requester's own write
		// (protocol/doc.go, Provisional results). Only when the write
		// would wait for the disk alone: under load it shares a batch's
		// sync, and sending first spread the batches (64 delegations in
		// flight took a quarter longer each, docs/performance.md).
		early := stored != nil && e.st.Syncs() && e.st.Quiet()
		if early {
			e.sendResult(role, requester, events, res, deliver, raw)
		}
		if e.beforeMergedWrite != nil {
			e.beforeMergedWrite()
		}
		d := *f.create
		d.State, d.Result, d.Reason, d.Usage = state, raw, cmp.Or(why.local, reason), store.Usage(usage)
		if err := e.create(d, append(events, resultEv)...); err != nil {
			e.log.Error("store result", "delegation", id, "err", err)
			f.abort() // no confirmation comes: the requester stops waiting
			return
		}
		e.publishNew(role, id, 1, append(events, resultEv))
		if early {
			if role == store.RoleProvider {
				e.traceEncoded(Sent, requester, stored)
			}
			deliver(stored)
			return
		}
		tail = events // the accept goes out first
	} else {
		e.st.StageResult(role, id, raw) // its file is written outside the commit queue (store/stage.go)
		_, err = e.transitionAfter(role, id, tail, state, resultEv, func(d *store.Delegation) {
			d.Result = raw
			d.Reason = cmp.Or(why.local, reason)
			d.Usage = store.Usage(usage)
		})
		if err != nil {
			e.st.DropStaged(role, id)
			if !errors.Is(err, store.ErrTerminal) {
				e.log.Error("store result", "delegation", id, "err", err)
			}
			return
		}
	}
	if stored != nil {
		e.sendResult(role, requester, tail, res, deliver, raw, stored)
		return
	}
	e.sendResult(role, requester, tail, res, deliver, raw)
}

// storedConfirmation is the status that confirms a result of state is
// stored, to an offer that asked for provisional results (1.5).
func storedConfirmation(id protocol.DelegationID, state protocol.State) ([]byte, error) {
	return protocol.EncodeMessage(&protocol.DelegationStatus{ID: id, State: state, Stored: true})
}

// sendResult sends what the requester has not yet been sent (tail), then
// the result and what follows it (raws: the result, then its confirmation
// if any), in one Write.
func (e *providerHalf) sendResult(role store.Role, requester peer.ID, tail []store.Event, res *protocol.DelegationResult, deliver func(...[]byte), raws ...[]byte) {
	msgs := make([][]byte, 0, len(tail)+len(raws))
	for _, ev := range tail {
		if role == store.RoleProvider {
			e.traceEncoded(Sent, requester, ev.Data)
		}
		msgs = append(msgs, ev.Data)
	}
	if role == store.RoleProvider {
		e.trace(Sent, requester, res)
		for _, raw := range raws[1:] {
			e.traceEncoded(Sent, requester, raw)
		}
	}
	deliver(append(msgs, raws...)...)
}
