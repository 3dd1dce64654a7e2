package store

import "errors"

// Sentinel errors. Every error a Store returns that callers may want to act
// on wraps one of these (test with errors.Is); the wrapping text says which
// record and which rule.
var (
	// ErrNotFound: the peer, delegation, context or meta key does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: CreateDelegation found a delegation with that role and ID.
	ErrExists = errors.New("store: already exists")
	// ErrTerminal: the delegation is already in a terminal state; the first
	// terminal state wins and nothing moves it again.
	ErrTerminal = errors.New("store: delegation already in a terminal state")
	// ErrSchemaTooNew: the database was written by a newer kith whose schema
	// this binary does not know. Nothing was changed.
	ErrSchemaTooNew = errors.New("store: schema version too new")
	// ErrCorrupt: a record or the schema marker cannot be decoded.
	ErrCorrupt = errors.New("store: corrupt database")
	// ErrClosed: the Store has been closed.
	ErrClosed = errors.New("store: closed")
	// ErrInvalid: the caller passed something the store refuses to record
	// (a zero ID, an unknown enum, a change to an immutable field).
	ErrInvalid = errors.New("store: invalid argument")
)
