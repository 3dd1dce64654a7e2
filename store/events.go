package store

import (
	"fmt"
	"math"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/kithmesh/kith/protocol"
)

// EventState is the Type Transition gives an event that names none.
const EventState = "state"

// Event is one entry in a delegation's event log: a state transition,
// progress, a piece of partial output. Seq numbers a delegation's events
// from 1, without gaps, in commit order; it is what delegation_status
// carries and what a reattaching requester resumes after.
type Event struct {
	Seq   uint64
	At    time.Time
	Type  string
	State protocol.State // the delegation's state once this event applied
	Data  []byte         // opaque to the store
}

type eventRecord struct {
	Seq   uint64         `json:"seq"`
	At    int64          `json:"at_ns"`
	Type  string         `json:"type"`
	State protocol.State `json:"state"`
	Data  []byte         `json:"data,omitempty"`
}

// Transition moves a delegation to state to, atomically: it refuses to
// leave a terminal state (ErrTerminal: the first terminal state wins),
// applies mutate (which may be nil), sets State and UpdatedAt, and appends
// ev with the next sequence number, all in one transaction. ev.State is set
// to to; a zero ev.At is now; an empty ev.Type is EventState. mutate may
// run more than once, must not change State or the identity fields (see
// UpdateDelegation), and must not call the Store. mutate sees Offer and
// Result empty, left unread so that a transition costs the same whatever
// their size; one it sets is written, and one it leaves empty is unchanged
// (UpdateDelegation can remove one). It returns the stored delegation, whose
// LastSeq is the appended event's sequence number, with the Offer and
// Result that mutate set and no others.
func (s *Store) Transition(role Role, id protocol.DelegationID, to protocol.State, ev Event, mutate func(*Delegation)) (Delegation, error) {
	return s.TransitionAfter(role, id, nil, to, ev, mutate)
}

// TransitionAfter is Transition that first appends before (non-transition
// events: a zero State is the delegation's state before the transition),
// all in the same transaction. It lets a caller that batched events in
// memory make them durable with the transition that follows them, in one
// write. The returned LastSeq is the transition event's; before's events
// have the sequence numbers just below it.
func (s *Store) TransitionAfter(role Role, id protocol.DelegationID, before []Event, to protocol.State, ev Event, mutate func(*Delegation)) (Delegation, error) {
	if err := validKey(role, id); err != nil {
		return Delegation{}, err
	}
	if _, err := to.MarshalText(); err != nil || to == protocol.StateUnknown {
		return Delegation{}, fmt.Errorf("%w: %s: transition to %s", ErrInvalid, dlgName(role, id), to)
	}
	if err := s.checkSize(ev.Data); err != nil {
		return Delegation{}, err
	}
	for _, b := range before {
		if b.Type == "" {
			return Delegation{}, fmt.Errorf("%w: %s: event without a type", ErrInvalid, dlgName(role, id))
		}
		if err := s.checkSize(b.Data); err != nil {
			return Delegation{}, err
		}
	}
	var out Delegation
	var committed []Event
	err := s.update([]string{string(delegationKey(role, id))}, func(txn *wtxn) error {
		committed = committed[:0]
		// The blobs stay unread: putDelegation below writes the ones mutate
		// set, and leaves the others alone.
		old, err := s.getDelegation(txn, role, id, noBlobs)
		if err != nil {
			return err
		}
		if old.State.Terminal() {
			return fmt.Errorf("%w: %s is already %s, cannot move to %s",
				ErrTerminal, dlgName(role, id), old.State, to)
		}
		d := old
		if mutate != nil {
			mutate(&d)
			if err := checkImmutable(old, d); err != nil {
				return err
			}
			if err := s.checkSize(d.Offer, d.Result); err != nil {
				return err
			}
		}
		now := s.clock()
		for _, b := range before {
			if b.State == protocol.StateUnknown {
				b.State = old.State
			}
			if b.At.IsZero() {
				b.At = now
			}
			committed = append(committed, b)
		}
		d.State, d.UpdatedAt = to, now
		if err := s.putDelegation(txn, d, &old); err != nil {
			return err
		}
		e := ev // a retry must start again from the caller's event
		e.State = to
		if e.Type == "" {
			e.Type = EventState
		}
		if e.At.IsZero() {
			e.At = now
		}
		committed = append(committed, e)
		if d.LastSeq, err = s.appendEvents(txn, role, id, old.LastSeq, committed); err != nil {
			return err
		}
		out = d
		return nil
	})
	if err == nil {
		s.notify(role, id, committed...)
	}
	return out, err
}

// AppendEvent appends a non-transition event (progress, partial output) to
// a delegation's log and returns its sequence number. It is allowed in any
// state. A zero ev.State is the delegation's current state; a zero ev.At is
// now; ev.Type is required. The delegation record itself is not rewritten,
// so streaming many events stays cheap.
func (s *Store) AppendEvent(role Role, id protocol.DelegationID, ev Event) (uint64, error) {
	if err := validKey(role, id); err != nil {
		return 0, err
	}
	if ev.Type == "" {
		return 0, fmt.Errorf("%w: %s: event without a type", ErrInvalid, dlgName(role, id))
	}
	if err := s.checkSize(ev.Data); err != nil {
		return 0, err
	}
	var seq uint64
	var committed Event
	// Same lock as Transition: an event never slips between a transition's
	// state check and its commit, so event order is state order.
	err := s.update([]string{string(delegationKey(role, id))}, func(txn *wtxn) error {
		d, err := s.getDelegation(txn, role, id, noBlobs)
		if err != nil {
			return err
		}
		e := ev // a retry must start again from the caller's event
		if e.State == protocol.StateUnknown {
			e.State = d.State
		}
		if e.At.IsZero() {
			e.At = s.clock()
		}
		evs := []Event{e}
		seq, err = s.appendEvents(txn, role, id, d.LastSeq, evs)
		committed = evs[0]
		return err
	})
	if err == nil {
		s.notify(role, id, committed)
	}
	return seq, err
}

// appendEvents writes evs as the events after last, the delegation's last
// sequence number, which the caller read in txn (getDelegation's LastSeq,
// or 0 for a delegation it is creating), sets each one's Seq, and returns
// the new last. Reading last again here would be a second lookup of the
// same key, in the store's one write transaction at a time; the sequence
// key is written once for all of evs.
func (s *Store) appendEvents(txn *wtxn, role Role, id protocol.DelegationID, last uint64, evs []Event) (uint64, error) {
	if len(evs) == 0 {
		return last, nil
	}
	for i := range evs {
		e := &evs[i]
		last++
		e.Seq = last
		r := eventRecord{Seq: last, At: nanos(e.At), Type: e.Type, State: e.State, Data: e.Data}
		if err := setRecord(txn, eventKey(role, id, last), r.encode, "event"); err != nil {
			return 0, fmt.Errorf("%s: %w", dlgName(role, id), err)
		}
	}
	if err := txn.Set(eventSeqKey(role, id), be64(last)); err != nil {
		return 0, fmt.Errorf("store: write the event sequence of %s: %w", dlgName(role, id), err)
	}
	return last, nil
}

// Events returns a delegation's events with Seq > afterSeq, in order
// (afterSeq 0 returns them all). An unknown delegation is ErrNotFound.
func (s *Store) Events(role Role, id protocol.DelegationID, afterSeq uint64) ([]Event, error) {
	if err := validKey(role, id); err != nil {
		return nil, err
	}
	var out []Event
	err := s.view(func(txn *wtxn) error {
		if _, err := s.getDelegation(txn, role, id, noBlobs); err != nil {
			return err
		}
		if afterSeq == math.MaxUint64 {
			return nil
		}
		start := eventKey(role, id, afterSeq+1)
		return scanPrefix(txn, eventPrefix(role, id), start, false, func(item *badger.Item) error {
			var r eventRecord
			err := item.Value(func(b []byte) (err error) {
				r, err = decodeEventRecord(b, "event")
				if err != nil {
					err = fmt.Errorf("%s: %w", dlgName(role, id), err)
				}
				return err
			})
			if err != nil {
				return err
			}
			out = append(out, Event{Seq: r.Seq, At: fromNanos(r.At), Type: r.Type, State: r.State, Data: r.Data})
			return nil
		})
	})
	return out, err
}
