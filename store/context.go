package store

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/kithmesh/kith/protocol"
)

// Context groups the delegations of one conversation (A2A context_id), in
// the order they joined it.
type Context struct {
	ID          protocol.ContextID
	Delegations []protocol.DelegationID
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

type contextRecord struct {
	ID          string                  `json:"id"`
	Delegations []protocol.DelegationID `json:"delegations"`
	CreatedAt   int64                   `json:"created_at_ns"`
	UpdatedAt   int64                   `json:"updated_at_ns"`
}

func validContextID(id protocol.ContextID) error {
	if id == "" {
		return fmt.Errorf("%w: empty context id", ErrInvalid)
	}
	if len(id) > protocol.MaxContextIDLen {
		return fmt.Errorf("%w: context id of %d bytes exceeds %d", ErrInvalid, len(id), protocol.MaxContextIDLen)
	}
	return nil
}

// AddToContext adds a delegation to a context, creating the context if
// needed. Adding one that is already there changes nothing. CreateDelegation
// already does this for a delegation with a ContextID.
func (s *Store) AddToContext(ctxID protocol.ContextID, id protocol.DelegationID) error {
	if err := validContextID(ctxID); err != nil {
		return err
	}
	if id.IsZero() {
		return fmt.Errorf("%w: zero delegation id", ErrInvalid)
	}
	return s.update([]string{string(contextKey(ctxID))}, func(txn *badger.Txn) error {
		return s.addToContext(txn, ctxID, id)
	})
}

func (s *Store) addToContext(txn *badger.Txn, ctxID protocol.ContextID, id protocol.DelegationID) error {
	now := nanos(s.clock())
	var r contextRecord
	err := getJSON(txn, contextKey(ctxID), &r, "context "+string(ctxID))
	switch {
	case errors.Is(err, ErrNotFound):
		r = contextRecord{ID: string(ctxID), CreatedAt: now}
	case err != nil:
		return err
	case slices.Contains(r.Delegations, id):
		return nil
	}
	r.Delegations = append(r.Delegations, id)
	r.UpdatedAt = now
	return setJSON(txn, contextKey(ctxID), r, "context "+string(ctxID))
}

// GetContext returns a context or ErrNotFound.
func (s *Store) GetContext(id protocol.ContextID) (Context, error) {
	var r contextRecord
	err := s.view(func(txn *badger.Txn) error {
		return getJSON(txn, contextKey(id), &r, "context "+string(id))
	})
	if err != nil {
		return Context{}, err
	}
	return Context{
		ID: protocol.ContextID(r.ID), Delegations: r.Delegations,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt),
	}, nil
}
