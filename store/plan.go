package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
)

// WorkPlans (delegation/plan) keep three kinds of record under one prefix of
// their own, so that nothing else in the key space moves for them:
//
//	plan/p/<plan hex>                    planRecord
//	plan/s/<plan hex>/<subtask id>       planSubtaskRecord
//	plan/l/<plan hex>/<seq>              planEntryRecord (the decisions ledger)
//	plan/q/<plan hex>                    last ledger sequence number
//
// Records are JSON with a version field: plans are small and off the hot
// path. A record of a version this binary does not know is refused with
// ErrSchemaTooNew, never guessed at. States are the plan package's text
// forms; the store keeps them as it is given them.
const (
	prefixPlan        = "plan/"
	prefixPlanRecord  = prefixPlan + "p/"
	prefixPlanSubtask = prefixPlan + "s/"
	prefixPlanEntry   = prefixPlan + "l/"
	prefixPlanSeq     = prefixPlan + "q/"
	planVersion       = 1
)

func planKey(id protocol.DelegationID) []byte { return []byte(prefixPlanRecord + id.String()) }

func planSubtaskPrefix(id protocol.DelegationID) []byte {
	return []byte(prefixPlanSubtask + id.String() + "/")
}

func planEntryPrefix(id protocol.DelegationID) []byte {
	return []byte(prefixPlanEntry + id.String() + "/")
}

func planLock(id protocol.DelegationID) string { return "lock/plan/" + id.String() }

// Plan is one WorkPlan as the coordinator that runs it records it.
type Plan struct {
	ID    protocol.DelegationID // also the Parent of every delegation it makes
	Name  string
	Spec  []byte // the validated plan, opaque to the store
	State string
	// Reason says why a plan failed or was cancelled.
	Reason    string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// PlanSubtask is the durable state of one subtask of a plan (the assemble
// step included): its state and every attempt made to run it.
type PlanSubtask struct {
	Plan      protocol.DelegationID
	ID        string
	State     string
	Attempts  []PlanAttempt
	UpdatedAt time.Time
}

// PlanAttempt is one delegation made for a subtask. Marker is written
// before the delegation exists, so that a restart can find a delegation
// whose ID was never recorded (it carries Marker as its context ID).
type PlanAttempt struct {
	Marker     protocol.ContextID
	Delegation protocol.DelegationID // zero until the engine returned it
	Peer       peer.ID               // the provider; empty when it ran here
	Local      bool
	State      string
	Reason     string
	Budget     uint64
	Used       uint64
	StartedAt  time.Time
	EndedAt    time.Time
}

// PlanEntry is one entry of a plan's decisions ledger. Entries are only
// ever appended: a proposal, and later a decision or a rejection that
// names it (Ref). Seq orders them.
type PlanEntry struct {
	Plan       protocol.DelegationID
	Seq        uint64
	Kind       string // proposal, decision, rejection
	Slug       string
	Type       string
	Body       string
	Subtask    string                // the subtask whose result proposed it
	Delegation protocol.DelegationID // the delegation whose result carried it
	Ref        uint64                // decision, rejection: the proposal's Seq
	Why        string
	Origin     string // who merged or rejected: "cli", "api", …
	At         time.Time
}

type planRecord struct {
	V         int    `json:"v"`
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	Spec      []byte `json:"spec"`
	State     string `json:"state"`
	Reason    string `json:"reason,omitempty"`
	CreatedAt int64  `json:"created_at_ns"`
	UpdatedAt int64  `json:"updated_at_ns"`
}

type planAttemptRecord struct {
	Marker     string `json:"marker"`
	Delegation string `json:"delegation,omitempty"`
	Peer       string `json:"peer,omitempty"`
	Local      bool   `json:"local,omitempty"`
	State      string `json:"state"`
	Reason     string `json:"reason,omitempty"`
	Budget     uint64 `json:"budget"`
	Used       uint64 `json:"used,omitempty"`
	StartedAt  int64  `json:"started_at_ns"`
	EndedAt    int64  `json:"ended_at_ns,omitempty"`
}

type planSubtaskRecord struct {
	V         int                 `json:"v"`
	ID        string              `json:"id"`
	State     string              `json:"state"`
	Attempts  []planAttemptRecord `json:"attempts,omitempty"`
	UpdatedAt int64               `json:"updated_at_ns"`
}

type planEntryRecord struct {
	V          int    `json:"v"`
	Seq        uint64 `json:"seq"`
	Kind       string `json:"kind"`
	Slug       string `json:"slug"`
	Type       string `json:"type,omitempty"`
	Body       string `json:"body,omitempty"`
	Subtask    string `json:"subtask,omitempty"`
	Delegation string `json:"delegation,omitempty"`
	Ref        uint64 `json:"ref,omitempty"`
	Why        string `json:"why,omitempty"`
	Origin     string `json:"origin,omitempty"`
	At         int64  `json:"at_ns"`
}

func idText(id protocol.DelegationID) string {
	if id.IsZero() {
		return ""
	}
	return id.String()
}

func parseID(s, what string) (protocol.DelegationID, error) {
	var id protocol.DelegationID
	if s == "" {
		return id, nil
	}
	if err := id.UnmarshalText([]byte(s)); err != nil {
		return id, fmt.Errorf("%w: %s %q: %v", ErrCorrupt, what, s, err)
	}
	return id, nil
}

func checkPlanVersion(v int, what string) error {
	switch {
	case v == planVersion:
		return nil
	case v > planVersion:
		return fmt.Errorf("%w: %s is version %d, this kith reads %d", ErrSchemaTooNew, what, v, planVersion)
	default:
		return fmt.Errorf("%w: %s has version %d", ErrCorrupt, what, v)
	}
}

func (p Plan) record() planRecord {
	return planRecord{V: planVersion, ID: p.ID.String(), Name: p.Name, Spec: p.Spec, State: p.State, Reason: p.Reason,
		CreatedAt: nanos(p.CreatedAt), UpdatedAt: nanos(p.UpdatedAt)}
}

func (r planRecord) plan() (Plan, error) {
	what := "plan " + r.ID
	if err := checkPlanVersion(r.V, what); err != nil {
		return Plan{}, err
	}
	id, err := parseID(r.ID, what)
	if err != nil {
		return Plan{}, err
	}
	return Plan{ID: id, Name: r.Name, Spec: r.Spec, State: r.State, Reason: r.Reason,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt)}, nil
}

func (s PlanSubtask) record() planSubtaskRecord {
	r := planSubtaskRecord{V: planVersion, ID: s.ID, State: s.State, UpdatedAt: nanos(s.UpdatedAt)}
	for _, a := range s.Attempts {
		r.Attempts = append(r.Attempts, planAttemptRecord{
			Marker: string(a.Marker), Delegation: idText(a.Delegation), Peer: peerText(a.Peer), Local: a.Local,
			State: a.State, Reason: a.Reason, Budget: a.Budget, Used: a.Used,
			StartedAt: nanos(a.StartedAt), EndedAt: nanos(a.EndedAt),
		})
	}
	return r
}

func peerText(p peer.ID) string {
	if p == "" {
		return ""
	}
	return p.String()
}

func (r planSubtaskRecord) subtask(plan protocol.DelegationID) (PlanSubtask, error) {
	what := "plan " + plan.String() + " subtask " + r.ID
	if err := checkPlanVersion(r.V, what); err != nil {
		return PlanSubtask{}, err
	}
	s := PlanSubtask{Plan: plan, ID: r.ID, State: r.State, UpdatedAt: fromNanos(r.UpdatedAt)}
	for _, a := range r.Attempts {
		d, err := parseID(a.Delegation, what+" delegation")
		if err != nil {
			return s, err
		}
		var p peer.ID
		if a.Peer != "" {
			if p, err = peer.Decode(a.Peer); err != nil {
				return s, fmt.Errorf("%w: %s peer %q: %v", ErrCorrupt, what, a.Peer, err)
			}
		}
		s.Attempts = append(s.Attempts, PlanAttempt{
			Marker: protocol.ContextID(a.Marker), Delegation: d, Peer: p, Local: a.Local,
			State: a.State, Reason: a.Reason, Budget: a.Budget, Used: a.Used,
			StartedAt: fromNanos(a.StartedAt), EndedAt: fromNanos(a.EndedAt),
		})
	}
	return s, nil
}

func (e PlanEntry) record() planEntryRecord {
	return planEntryRecord{V: planVersion, Seq: e.Seq, Kind: e.Kind, Slug: e.Slug, Type: e.Type, Body: e.Body,
		Subtask: e.Subtask, Delegation: idText(e.Delegation), Ref: e.Ref, Why: e.Why, Origin: e.Origin, At: nanos(e.At)}
}

func (r planEntryRecord) entry(plan protocol.DelegationID) (PlanEntry, error) {
	what := fmt.Sprintf("plan %s ledger entry %d", plan, r.Seq)
	if err := checkPlanVersion(r.V, what); err != nil {
		return PlanEntry{}, err
	}
	d, err := parseID(r.Delegation, what+" delegation")
	if err != nil {
		return PlanEntry{}, err
	}
	return PlanEntry{Plan: plan, Seq: r.Seq, Kind: r.Kind, Slug: r.Slug, Type: r.Type, Body: r.Body,
		Subtask: r.Subtask, Delegation: d, Ref: r.Ref, Why: r.Why, Origin: r.Origin, At: fromNanos(r.At)}, nil
}

func putPlanJSON(txn *wtxn, key []byte, v any, what string) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s: %w", what, err)
	}
	if err := txn.Set(key, b); err != nil {
		return fmt.Errorf("store: write %s: %w", what, err)
	}
	return nil
}

func getPlanJSON(txn *wtxn, key []byte, v any, what string) error {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	}
	if err != nil {
		return fmt.Errorf("store: read %s: %w", what, err)
	}
	return item.Value(func(b []byte) error {
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("%w: decode %s: %v", ErrCorrupt, what, err)
		}
		return nil
	})
}

// planValues decodes the JSON record under every key below prefix, in key
// order, and converts each with conv; what names the records in errors.
func planValues[R, T any](txn *wtxn, prefix []byte, what string, conv func(R) (T, error)) ([]T, error) {
	var out []T
	err := scanPrefix(txn, prefix, nil, false, func(item *badger.Item) error {
		return item.Value(func(v []byte) error {
			var r R
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("%w: decode %s: %v", ErrCorrupt, what, err)
			}
			x, err := conv(r)
			if err != nil {
				return err
			}
			out = append(out, x)
			return nil
		})
	})
	return out, err
}

func validSubtaskID(id string) error {
	if id == "" || len(id) > maxKeySize/4 || strings.ContainsAny(id, "/\x00") {
		return fmt.Errorf("%w: subtask id %q", ErrInvalid, id)
	}
	return nil
}

// CreatePlan records a new plan and the first state of each of its
// subtasks, all at once. A plan with that ID already recorded is ErrExists.
func (s *Store) CreatePlan(p Plan, subtasks []PlanSubtask) error {
	if p.ID.IsZero() {
		return fmt.Errorf("%w: zero plan id", ErrInvalid)
	}
	if err := s.checkSize(p.Spec); err != nil {
		return err
	}
	for _, st := range subtasks {
		if err := validSubtaskID(st.ID); err != nil {
			return err
		}
	}
	now := s.clock()
	p.CreatedAt, p.UpdatedAt = now, now
	return s.update([]string{planLock(p.ID)}, func(txn *wtxn) error {
		if _, err := txn.Get(planKey(p.ID)); err == nil {
			return fmt.Errorf("%w: plan %s", ErrExists, p.ID)
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("store: read plan %s: %w", p.ID, err)
		}
		if err := putPlanJSON(txn, planKey(p.ID), p.record(), "plan "+p.ID.String()); err != nil {
			return err
		}
		for _, st := range subtasks {
			st.UpdatedAt = now
			if err := putPlanJSON(txn, append(planSubtaskPrefix(p.ID), st.ID...), st.record(), "plan subtask "+st.ID); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetPlan returns a plan or ErrNotFound.
func (s *Store) GetPlan(id protocol.DelegationID) (Plan, error) {
	var r planRecord
	err := s.view(func(txn *wtxn) error {
		return getPlanJSON(txn, planKey(id), &r, "plan "+id.String())
	})
	if err != nil {
		return Plan{}, err
	}
	return r.plan()
}

// UpdatePlan changes a plan's State and Reason through fn (its ID, Spec and
// creation time are kept as they are).
func (s *Store) UpdatePlan(id protocol.DelegationID, fn func(*Plan) error) (Plan, error) {
	var out Plan
	err := s.update([]string{planLock(id)}, func(txn *wtxn) error {
		var r planRecord
		if err := getPlanJSON(txn, planKey(id), &r, "plan "+id.String()); err != nil {
			return err
		}
		p, err := r.plan()
		if err != nil {
			return err
		}
		next := p
		if err := fn(&next); err != nil {
			return err
		}
		next.ID, next.Spec, next.Name, next.CreatedAt = p.ID, p.Spec, p.Name, p.CreatedAt
		next.UpdatedAt = s.clock()
		out = next
		return putPlanJSON(txn, planKey(id), next.record(), "plan "+id.String())
	})
	return out, err
}

// ListPlans returns every plan, newest first.
func (s *Store) ListPlans() ([]Plan, error) {
	var out []Plan
	err := s.view(func(txn *wtxn) (err error) {
		out, err = planValues(txn, []byte(prefixPlanRecord), "plan", planRecord.plan)
		return err
	})
	slices.SortStableFunc(out, func(a, b Plan) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, err
}

// PlanSubtasks returns the subtasks of a plan, ordered by ID.
func (s *Store) PlanSubtasks(id protocol.DelegationID) ([]PlanSubtask, error) {
	var out []PlanSubtask
	err := s.view(func(txn *wtxn) (err error) {
		out, err = planValues(txn, planSubtaskPrefix(id), "plan "+id.String()+" subtask",
			func(r planSubtaskRecord) (PlanSubtask, error) { return r.subtask(id) })
		return err
	})
	return out, err
}

// PutPlanSubtask replaces the state of one subtask of an existing plan;
// see PutPlanSubtasks.
func (s *Store) PutPlanSubtask(st PlanSubtask, entries func(ledger []PlanEntry) ([]PlanEntry, error)) ([]PlanEntry, error) {
	return s.PutPlanSubtasks(st.Plan, []PlanSubtask{st}, entries)
}

// PutPlanSubtasks replaces the state of subtasks of an existing plan and
// appends the entries that entries (when not nil) builds from the ledger as
// it stands to the plan's ledger, all in one write, so that results and the
// proposals they carried are recorded together or not at all. It returns
// the entries as numbered.
func (s *Store) PutPlanSubtasks(plan protocol.DelegationID, subs []PlanSubtask, entries func(ledger []PlanEntry) ([]PlanEntry, error)) ([]PlanEntry, error) {
	for _, st := range subs {
		if err := validSubtaskID(st.ID); err != nil {
			return nil, err
		}
		if st.Plan != plan {
			return nil, fmt.Errorf("%w: subtask %s belongs to plan %s, not %s", ErrInvalid, st.ID, st.Plan, plan)
		}
	}
	var out []PlanEntry
	err := s.update([]string{planLock(plan)}, func(txn *wtxn) error {
		if _, err := txn.Get(planKey(plan)); errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: plan %s", ErrNotFound, plan)
		} else if err != nil {
			return fmt.Errorf("store: read plan %s: %w", plan, err)
		}
		now := s.clock()
		for _, st := range subs {
			st.UpdatedAt = now
			if err := putPlanJSON(txn, append(planSubtaskPrefix(plan), st.ID...), st.record(), "plan subtask "+st.ID); err != nil {
				return err
			}
		}
		if entries == nil {
			return nil
		}
		ledger, err := planLedger(txn, plan)
		if err != nil {
			return err
		}
		add, err := entries(ledger)
		if err != nil {
			return err
		}
		out, err = s.appendPlanEntries(txn, plan, add)
		return err
	})
	return out, err
}

// AppendPlanEntries appends entries to a plan's ledger, numbering them in
// order, and returns them as stored. check, when set, runs in the same
// transaction with the ledger as it stands, so a rule about existing
// entries (a proposal is merged once) holds against concurrent writers.
func (s *Store) AppendPlanEntries(plan protocol.DelegationID, check func(ledger []PlanEntry) ([]PlanEntry, error)) ([]PlanEntry, error) {
	var out []PlanEntry
	err := s.update([]string{planLock(plan)}, func(txn *wtxn) error {
		if _, err := txn.Get(planKey(plan)); errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("%w: plan %s", ErrNotFound, plan)
		} else if err != nil {
			return fmt.Errorf("store: read plan %s: %w", plan, err)
		}
		ledger, err := planLedger(txn, plan)
		if err != nil {
			return err
		}
		entries, err := check(ledger)
		if err != nil {
			return err
		}
		out, err = s.appendPlanEntries(txn, plan, entries)
		return err
	})
	return out, err
}

func (s *Store) appendPlanEntries(txn *wtxn, plan protocol.DelegationID, entries []PlanEntry) ([]PlanEntry, error) {
	out := make([]PlanEntry, 0, len(entries))
	now := s.clock()
	for _, e := range entries {
		if e.Kind == "" || e.Slug == "" {
			return nil, fmt.Errorf("%w: ledger entry without kind or slug", ErrInvalid)
		}
		seq, err := nextSeq(txn, []byte(prefixPlanSeq+plan.String()))
		if err != nil {
			return nil, err
		}
		e.Plan, e.Seq, e.At = plan, seq, now
		r := e.record()
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("store: encode ledger entry: %w", err)
		}
		if err := s.checkSize(b); err != nil {
			return nil, err
		}
		if err := txn.Set(append(planEntryPrefix(plan), be64(seq)...), b); err != nil {
			return nil, fmt.Errorf("store: write ledger entry %d: %w", seq, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func planLedger(txn *wtxn, plan protocol.DelegationID) ([]PlanEntry, error) {
	return planValues(txn, planEntryPrefix(plan), "plan "+plan.String()+" ledger entry",
		func(r planEntryRecord) (PlanEntry, error) { return r.entry(plan) })
}

// PlanLedger returns a plan's ledger, oldest entry first.
func (s *Store) PlanLedger(plan protocol.DelegationID) ([]PlanEntry, error) {
	var out []PlanEntry
	err := s.view(func(txn *wtxn) error {
		var err error
		out, err = planLedger(txn, plan)
		return err
	})
	return out, err
}
