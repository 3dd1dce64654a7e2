package delegation

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/gpu"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// task is a delegation this node is running, for a peer (role provider) or
// for itself (a local profile, role requester).
type task struct {
	id        protocol.DelegationID // where the store keeps it
	wire      protocol.DelegationID // what the requester calls it; see providerKey
	role      store.Role
	requester peer.ID             // who asked; this node for local work
	trust     protocol.TrustLevel // the requester's when its slot was taken
	offer     *protocol.DelegationOffer
	offerHash *digest
	profile   *Profile
	deadline  time.Time
	remote    bool // holds a remote-pool slot
	lease     *gpu.Lease
	cancel    context.CancelCauseFunc
	done      chan struct{}

	mu        sync.Mutex
	conn      *protocol.Conn // attached requester stream; nil while detached
	statusSeq uint64
	// The conversation of a multi-turn delegation (turns.go), under mu.
	turn    uint32              // the turn running or asking, from 1
	turns   []executor.Exchange // questions asked, each with its answer once taken
	used    executor.Usage      // what the turns before this one used
	waiting bool                // a question is out and no answer taken yet
	// answered wakes the task when an answer is taken (buffered, 1).
	answered chan struct{}
	// resumed: recovered at start while waiting for an answer, so the
	// task starts by waiting, holding no slot or lease.
	resumed bool

	// logMu guards the opening and the log kept in memory.
	logMu sync.Mutex
	// open says whether the task's record is in the store yet. A remote
	// task starts before it is stored (openPending), so that a task that
	// ends quickly is stored once, with its result (see openDelay).
	open openState
	// record and openEvs are what the first write stores while the task is
	// pending: the delegation, its accept and its running status.
	record    store.Delegation
	openEvs   []store.Event
	openTimer *time.Timer
	abort     func() // resets the stream the task was offered on
	// logged is every event stored for the task, in order: the transcript
	// its result proof covers, kept so that finishing reads nothing back.
	logged []store.Event
}

// openState is whether a task's record has been written.
type openState uint8

const (
	openDone    openState = iota // stored (a local task is stored before it starts)
	openPending                  // not yet: nothing is sent before it is
	openFailed                   // the write failed: the task is cancelled, nothing is sent
	openMerged                   // stored with the result, in one write
)

// attach makes c the stream that receives this task's messages.
func (t *task) attach(c *protocol.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.conn = c
}

func (t *task) releaseLease() {
	if t.lease != nil {
		t.lease.Release()
	}
}

// send writes raws to the requester's stream, if one is attached, in one
// Write (one muxer frame, one record of the transport's) when several go
// out one after the other. A failed write detaches the stream: what was
// sent is in the log, and a reattach replays it.
func (t *task) send(raws ...[]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn == nil {
		return
	}
	for _, raw := range raws {
		if err := t.conn.QueueEncoded(raw); err != nil {
			t.conn = nil
			return
		}
	}
	if err := t.conn.Flush(); err != nil {
		t.conn = nil
	}
}

// openingEvents builds the first two events a provider stores and sends for a
// task it accepts and starts at once: the accept and the running status.
func (t *task) openingEvents() (accept, running store.Event, err error) {
	m := &protocol.DelegationAccept{ID: t.wire, ProviderHandle: t.id.String()}
	if t.lease != nil {
		m.Lease = protocol.Lease{VRAMMiB: t.lease.VRAMMiB(), Device: t.lease.Device().UUID}
	}
	a, err := protocol.EncodeMessage(m)
	if err != nil {
		return accept, running, err
	}
	r, err := protocol.EncodeMessage(&protocol.DelegationStatus{ID: t.wire, State: protocol.StateRunning, Seq: t.nextSeq(), Turn: t.turnTag()})
	if err != nil {
		return accept, running, err
	}
	return store.Event{Type: EventAccepted, State: protocol.StateAccepted, Data: a},
		store.Event{Type: EventStatus, State: protocol.StateRunning, Data: r}, nil
}

func (t *task) nextSeq() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.statusSeq++
	return t.statusSeq
}

// errCancelled and friends are the causes a task's context is cancelled
// with, so the result says why it stopped.
type stopCause struct {
	state  protocol.State
	reason string
}

func (s *stopCause) Error() string { return s.state.String() + ": " + s.reason }

// taskInput turns the offered A2A parts into executor input.
func taskInput(o *protocol.DelegationOffer) executor.Task {
	var text []string
	var data [][]byte
	for _, p := range o.Task.Parts {
		switch p.Kind {
		case protocol.PartText:
			text = append(text, p.Text)
		case protocol.PartData:
			data = append(data, p.Data)
		case protocol.PartFile:
			if p.File.URI != "" {
				text = append(text, p.File.URI)
			}
		}
	}
	return executor.Task{
		Text:         strings.Join(text, "\n"),
		Data:         data,
		BudgetTokens: o.BudgetTokens,
		ContextID:    string(o.ContextID),
	}
}

// transcriptHash is the digest alg over the provider's side of a delegation:
// the accept and every status, in the order sent, each length-prefixed.
// Both sides keep those exact bytes in their event logs (a reattaching
// requester dedups replays by status seq), so both compute the same hash.
// Requester frames are covered by the offer hash, and in a multi-turn
// delegation by the continuations, which both sides log (EventTurn) between
// the question they answer and the next turn's first status: with the
// offer, they are all that shapes the result.
func transcriptHash(alg protocol.ProofDigest, events []store.Event) [32]byte {
	h := alg.Start()
	var n [binary.MaxVarintLen64]byte
	for _, ev := range currentAttempt(events) {
		if ev.Type != EventAccepted && ev.Type != EventStatus && ev.Type != EventTurn {
			continue
		}
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(ev.Data)))])
		h.Write(ev.Data)
	}
	return h.Finish()
}

// currentAttempt is the part of a requester's log that belongs to its
// current provider: everything after the last re-offer.
func currentAttempt(events []store.Event) []store.Event {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type == EventReoffer {
			return events[i+1:]
		}
	}
	return events
}

// history is the accept and statuses from a delegation's log, in order.
func history(events []store.Event) [][]byte {
	var out [][]byte
	for _, ev := range events {
		if ev.Type == EventAccepted || ev.Type == EventStatus {
			out = append(out, ev.Data)
		}
	}
	return out
}

// partsText joins the text parts of output.
func partsText(parts []protocol.Part) string {
	// One text part (every result of the built-in executors) is returned
	// as it is, and more are joined into one allocation: a 16 MiB result
	// was copied, and grown, once more to be read.
	n, texts, last := 0, 0, ""
	for _, p := range parts {
		if p.Kind == protocol.PartText && p.Text != "" {
			n, texts, last = n+len(p.Text), texts+1, p.Text
		}
	}
	if texts <= 1 {
		return last
	}
	var b strings.Builder
	b.Grow(n)
	for _, p := range parts {
		if p.Kind == protocol.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}
