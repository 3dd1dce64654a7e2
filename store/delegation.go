package store

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/kithmesh/kith/protocol"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Role is which side of a delegation this node is on. One DelegationID can
// exist under both roles on one node (a node that delegates to itself over
// the network), so records are keyed by (Role, ID). The zero Role is
// invalid, so a forgotten field is caught rather than stored.
type Role uint8

const (
	RoleRequester Role = iota + 1
	RoleProvider
)

var roleNames = [...]string{RoleRequester: "requester", RoleProvider: "provider"}

func (r Role) valid() bool { return r == RoleRequester || r == RoleProvider }

func (r Role) String() string {
	if r.valid() {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// MarshalText implements encoding.TextMarshaler.
func (r Role) MarshalText() ([]byte, error) {
	if !r.valid() {
		return nil, fmt.Errorf("%w: role %d", ErrInvalid, uint8(r))
	}
	return []byte(roleNames[r]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Role) UnmarshalText(b []byte) error {
	switch string(b) {
	case "requester":
		*r = RoleRequester
	case "provider":
		*r = RoleProvider
	default:
		return fmt.Errorf("%w: role %q (want requester or provider)", ErrInvalid, b)
	}
	return nil
}

// Usage is the token usage a provider reports.
type Usage struct {
	Prompt     uint64 `json:"prompt"`
	Completion uint64 `json:"completion"`
	Total      uint64 `json:"total"`
}

// Delegation is one delegated task as this node sees it.
type Delegation struct {
	ID     protocol.DelegationID
	Role   Role
	Peer   peer.ID // the other side; empty for a local (in-process) delegation
	Remote bool
	// Parent is the delegation this one was delegated from; zero for a root.
	Parent       protocol.DelegationID
	ContextID    protocol.ContextID
	Profile      string
	State        protocol.State
	Reason       string // why it failed, was rejected, cancelled…
	BudgetTokens uint64
	Usage        Usage
	// Offer and Result are the encoded wire messages, opaque to the store,
	// kept so a result can be re-sent and its proof verified later. They
	// are stored apart from the record and written only when they change,
	// so transitions do not rewrite a large offer each time.
	Offer     []byte
	Result    []byte
	CreatedAt time.Time
	UpdatedAt time.Time // last change to this record; events do not touch it
	Deadline  time.Time

	// LastSeq is the sequence number of the delegation's newest event (0:
	// none yet), read from the event log: what a reattaching requester
	// resumes after. Writes ignore it.
	LastSeq uint64

	// ResultLeftOut is set by a listing (DelegationFilter.Listing) on a
	// delegation whose Result it did not read: one stored in more than
	// ListResultMax bytes. Writes ignore it.
	ResultLeftOut bool
}

type delegationRecord struct {
	ID           protocol.DelegationID `json:"id"`
	Role         Role                  `json:"role"`
	Peer         string                `json:"peer,omitempty"` // base58: JSON (schema 1) and version 1 records only
	peer         peer.ID               // the peer, as every decoder returns it and encode writes it
	Remote       bool                  `json:"remote,omitempty"`
	Parent       protocol.DelegationID `json:"parent"`
	ContextID    string                `json:"context_id,omitempty"`
	Profile      string                `json:"profile,omitempty"`
	State        protocol.State        `json:"state"`
	Reason       string                `json:"reason,omitempty"`
	BudgetTokens uint64                `json:"budget_tokens,omitempty"`
	Usage        Usage                 `json:"usage"`
	CreatedAt    int64                 `json:"created_at_ns"`
	UpdatedAt    int64                 `json:"updated_at_ns"`
	Deadline     int64                 `json:"deadline_ns,omitempty"`
}

func (d Delegation) record() delegationRecord {
	r := delegationRecord{
		ID: d.ID, Role: d.Role, Remote: d.Remote, Parent: d.Parent,
		ContextID: string(d.ContextID), Profile: d.Profile, State: d.State, Reason: d.Reason,
		BudgetTokens: d.BudgetTokens, Usage: d.Usage,
		CreatedAt: nanos(d.CreatedAt), UpdatedAt: nanos(d.UpdatedAt), Deadline: nanos(d.Deadline),
		peer: d.Peer,
	}
	return r
}

func (r delegationRecord) delegation() (Delegation, error) {
	d := Delegation{
		ID: r.ID, Role: r.Role, Remote: r.Remote, Parent: r.Parent,
		ContextID: protocol.ContextID(r.ContextID), Profile: r.Profile, State: r.State, Reason: r.Reason,
		BudgetTokens: r.BudgetTokens, Usage: r.Usage,
		CreatedAt: fromNanos(r.CreatedAt), UpdatedAt: fromNanos(r.UpdatedAt), Deadline: fromNanos(r.Deadline),
		Peer: r.peer,
	}
	return d, nil
}

func dlgName(role Role, id protocol.DelegationID) string {
	return "delegation " + role.String() + "/" + id.String()
}

// Which blobs getDelegation reads beside the record.
type blobSet uint8

const (
	noBlobs    blobSet = 0
	withOffer  blobSet = 1 << 0
	withResult blobSet = 1 << 1
	allBlobs           = withOffer | withResult
	// smallResult reads the result only when it is stored in at most
	// ListResultMax bytes (a listing's).
	smallResult blobSet = 1 << 2
)

// getDelegation reads a delegation and its LastSeq, and the blobs asked for
// (callers that only check existence or state skip them).
func (s *Store) getDelegation(txn *wtxn, role Role, id protocol.DelegationID, blobs blobSet) (Delegation, error) {
	r, err := getDelegationRecord(txn, role, id)
	if err != nil {
		return Delegation{}, err
	}
	d, err := r.delegation()
	if err != nil {
		return Delegation{}, err
	}
	if d.LastSeq, err = getUint64(txn, eventSeqKey(role, id)); err != nil {
		return Delegation{}, err
	}
	if blobs&withOffer != 0 {
		if d.Offer, err = s.getBlob(txn, blobKey(role, id, blobOffer)); err != nil {
			return Delegation{}, err
		}
	}
	if blobs&withResult != 0 {
		if d.Result, err = s.getBlob(txn, blobKey(role, id, blobResult)); err != nil {
			return Delegation{}, err
		}
	} else if blobs&smallResult != 0 {
		key := blobKey(role, id, blobResult)
		n, err := s.blobSize(txn, key)
		if err != nil {
			return Delegation{}, err
		}
		if n > ListResultMax {
			d.ResultLeftOut = true
		} else if d.Result, err = s.getBlob(txn, key); err != nil {
			return Delegation{}, err
		}
	}
	return d, nil
}

// blobSize is how many bytes a blob takes, read from its reference when
// it is in a segment or a file of its own; 0 for none.
func (s *Store) blobSize(txn *wtxn, key []byte) (uint64, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: read %q: %w", key, err)
	}
	if item.UserMeta()&metaSegBlob != 0 {
		var ref segRef
		err := item.Value(func(b []byte) (err error) {
			ref, _, err = decodeSegRef(b)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("%q: %w", key, err)
		}
		return ref.size, nil
	}
	ref, isFile, err := itemFileRef(item)
	if err != nil {
		return 0, err
	}
	if isFile {
		return ref.size, nil
	}
	return uint64(item.ValueSize()), nil
}

func getDelegationRecord(txn *wtxn, role Role, id protocol.DelegationID) (delegationRecord, error) {
	var r delegationRecord
	item, err := txn.Get(delegationKey(role, id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return r, fmt.Errorf("%w: %s", ErrNotFound, dlgName(role, id))
	}
	if err != nil {
		return r, fmt.Errorf("store: read %s: %w", dlgName(role, id), err)
	}
	err = item.Value(func(b []byte) error {
		r, err = decodeDelegationRecord(b, "delegation record")
		if err != nil {
			err = fmt.Errorf("%s: %w", dlgName(role, id), err)
		}
		return err
	})
	return r, err
}

// getBlob reads a blob: inline, from its segment (segment.go) or from its
// file (blobfile.go).
func (s *Store) getBlob(txn *wtxn, key []byte) ([]byte, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %q: %w", key, err)
	}
	if item.UserMeta()&metaSegBlob != 0 {
		return s.getSegBlob(item)
	}
	ref, isFile, err := itemFileRef(item)
	if err != nil {
		return nil, err
	}
	if !isFile {
		return item.ValueCopy(nil)
	}
	if s.files == nil {
		return nil, fmt.Errorf("%w: %q refers to a file in a store without files", ErrCorrupt, key)
	}
	return s.files.read(ref, fmt.Sprintf("%q", key))
}

// putDelegation writes d's record, and each of its blobs that differs from
// old's (all of them when old is nil: a new delegation); on a disk store, a
// large blob goes to a file of its own (blobfile.go).
func (s *Store) putDelegation(txn *wtxn, d Delegation, old *Delegation) error {
	if _, err := d.State.MarshalText(); err != nil || d.State == protocol.StateUnknown {
		return fmt.Errorf("%w: %s state %s", ErrInvalid, dlgName(d.Role, d.ID), d.State)
	}
	if d.Peer != "" {
		if err := validPeerID(d.Peer); err != nil {
			return fmt.Errorf("%s: %w", dlgName(d.Role, d.ID), err)
		}
	}
	if err := setRecord(txn, delegationKey(d.Role, d.ID), d.record().encode, "delegation record"); err != nil {
		return fmt.Errorf("%s: %w", dlgName(d.Role, d.ID), err)
	}
	wroteFile := false
	var oldOffer, oldResult []byte // a new delegation has no blobs yet
	if old != nil {
		oldOffer, oldResult = old.Offer, old.Result
	}
	for _, b := range []struct {
		name     string
		new, old []byte
	}{{blobOffer, d.Offer, oldOffer}, {blobResult, d.Result, oldResult}} {
		if bytes.Equal(b.new, b.old) {
			continue
		}
		key := blobKey(d.Role, d.ID, b.name)
		var err error
		switch {
		case len(b.new) == 0:
			err = txn.Delete(key)
		case len(b.new) >= segBlobMin && len(b.new) < fileBlobMin && s.segs != nil:
			err = s.putSegBlob(txn, key, b.new)
		case len(b.new) >= fileBlobMin && s.files != nil:
			ref, ok := s.takeStaged(key, b.new) // stage.go: written and its name synced
			if !ok {
				ref, err = s.files.write(key, b.new)
				if wroteFile = err == nil; wroteFile {
					s.metrics.fileWritten("commit")
				}
			}
			if err == nil {
				err = txn.SetEntry(badger.NewEntry(key, ref.encode()).WithMeta(metaFileBlob))
			}
		default:
			// Not a copy: badger holds the slice until the commit, which
			// copies it into its logs before the store's call returns,
			// and the caller is in that call until then (a copy here was
			// a sixth of what a 1 MiB delegation allocated).
			err = txn.Set(key, b.new)
		}
		if err != nil {
			return fmt.Errorf("store: write %s of %s: %w", b.name, dlgName(d.Role, d.ID), err)
		}
	}
	if wroteFile {
		// The files' names are durable before the commit that names them.
		return s.files.syncDir()
	}
	return nil
}

func validKey(role Role, id protocol.DelegationID) error {
	if !role.valid() {
		return fmt.Errorf("%w: role %d", ErrInvalid, uint8(role))
	}
	if id.IsZero() {
		return fmt.Errorf("%w: zero delegation id", ErrInvalid)
	}
	return nil
}

// CreateDelegation stores a new delegation. A zero State becomes
// StateOffered, a zero CreatedAt becomes now and a zero UpdatedAt becomes
// CreatedAt. If ContextID is set, the delegation joins that context in the
// same transaction. A delegation with the same role and ID is ErrExists.
// events, if any, start the delegation's event log in the same
// transaction (a zero State is d.State, a zero At is now; Type is
// required): a provider that accepts and starts a task at once makes one
// durable write, not three.
func (s *Store) CreateDelegation(d Delegation, events ...Event) error {
	if err := validKey(d.Role, d.ID); err != nil {
		return err
	}
	if len(d.ContextID) > protocol.MaxContextIDLen {
		return fmt.Errorf("%w: context id of %d bytes exceeds %d", ErrInvalid, len(d.ContextID), protocol.MaxContextIDLen)
	}
	if d.State == protocol.StateUnknown {
		d.State = protocol.StateOffered
	}
	if d.CreatedAt.IsZero() {
		d.CreatedAt = s.clock()
	}
	if d.CreatedAt.UnixNano() < 0 {
		return fmt.Errorf("%w: %s created before 1970", ErrInvalid, dlgName(d.Role, d.ID))
	}
	if d.UpdatedAt.IsZero() {
		d.UpdatedAt = d.CreatedAt
	}
	if err := s.checkSize(d.Offer, d.Result); err != nil {
		return err
	}
	for _, ev := range events {
		if ev.Type == "" {
			return fmt.Errorf("%w: %s: event without a type", ErrInvalid, dlgName(d.Role, d.ID))
		}
		if err := s.checkSize(ev.Data); err != nil {
			return err
		}
	}
	// Its large values are written side by side, outside the commit queue
	// (stage.go), unless they were staged already.
	s.stage(blobKey(d.Role, d.ID, blobOffer), string(delegationKey(d.Role, d.ID)), d.Offer)
	s.stage(blobKey(d.Role, d.ID, blobResult), string(delegationKey(d.Role, d.ID)), d.Result)
	locks := []string{string(delegationKey(d.Role, d.ID))}
	if d.ContextID != "" {
		locks = append(locks, string(contextKey(d.ContextID)))
	}
	var committed []Event
	err := s.update(locks, func(txn *wtxn) error {
		committed = committed[:0]
		_, err := txn.Get(delegationKey(d.Role, d.ID))
		if err == nil {
			return fmt.Errorf("%w: %s", ErrExists, dlgName(d.Role, d.ID))
		}
		if !errors.Is(err, badger.ErrKeyNotFound) {
			return fmt.Errorf("store: read %s: %w", dlgName(d.Role, d.ID), err)
		}
		if err := s.putDelegation(txn, d, nil); err != nil {
			return err
		}
		for _, k := range [][]byte{
			parentIdxKey(d.Parent, d.Role, d.ID),
			createdIdxKey(nanos(d.CreatedAt), d.Role, d.ID),
		} {
			// A non-empty value: badger reads an empty one as a missing key.
			if err := txn.Set(k, []byte{1}); err != nil {
				return fmt.Errorf("store: index %s: %w", dlgName(d.Role, d.ID), err)
			}
		}
		// A delegation's log starts with its record: records are never
		// deleted, and every event is written with its record or after
		// reading it. No record, so no event before these.
		for _, ev := range events {
			if ev.State == protocol.StateUnknown {
				ev.State = d.State
			}
			if ev.At.IsZero() {
				ev.At = d.CreatedAt // one write, one time
			}
			committed = append(committed, ev)
		}
		if _, err := s.appendEvents(txn, d.Role, d.ID, 0, committed); err != nil {
			return err
		}
		if d.ContextID != "" {
			return s.addToContext(txn, d.ContextID, d.ID)
		}
		return nil
	})
	if err != nil {
		s.DropStaged(d.Role, d.ID) // nothing stored: no file kept
	}
	if err == nil {
		if len(committed) == 0 {
			// A delegation created without events still shows up.
			committed = []Event{{Type: "created", State: d.State, At: d.CreatedAt}}
		}
		s.notify(d.Role, d.ID, committed...)
	}
	return err
}

// GetDelegation returns the delegation or ErrNotFound.
func (s *Store) GetDelegation(role Role, id protocol.DelegationID) (Delegation, error) {
	return s.readDelegation(role, id, allBlobs)
}

// DelegationResult is GetDelegation without the Offer: for a requester
// that has the task it sent and wants the outcome.
func (s *Store) DelegationResult(role Role, id protocol.DelegationID) (Delegation, error) {
	return s.readDelegation(role, id, withResult)
}

// DelegationInfo is GetDelegation without the Offer and Result: cheap
// whatever their size, for callers that need the record only.
func (s *Store) DelegationInfo(role Role, id protocol.DelegationID) (Delegation, error) {
	return s.readDelegation(role, id, noBlobs)
}

func (s *Store) readDelegation(role Role, id protocol.DelegationID, blobs blobSet) (Delegation, error) {
	var d Delegation
	err := s.view(func(txn *wtxn) error {
		var err error
		d, err = s.getDelegation(txn, role, id, blobs)
		return err
	})
	return d, err
}

// UpdateDelegation applies fn to a delegation's non-state fields (Reason,
// Usage, Result, Peer, Deadline…) and stores it with UpdatedAt = now. It is
// allowed in any state, terminal included (a result may arrive after the
// state settled). State changes go through Transition, so fn must not change
// State, nor the identity fields ID, Role, Parent, ContextID and CreatedAt;
// if it does, nothing is written and the error wraps ErrInvalid. fn may run
// more than once and must not call the Store.
func (s *Store) UpdateDelegation(role Role, id protocol.DelegationID, fn func(*Delegation) error) (Delegation, error) {
	if err := validKey(role, id); err != nil {
		return Delegation{}, err
	}
	var out Delegation
	err := s.update([]string{string(delegationKey(role, id))}, func(txn *wtxn) error {
		old, err := s.getDelegation(txn, role, id, allBlobs)
		if err != nil {
			return err
		}
		d := old
		d.Offer, d.Result = bytes.Clone(old.Offer), bytes.Clone(old.Result)
		if err := fn(&d); err != nil {
			return err
		}
		if err := checkImmutable(old, d); err != nil {
			return err
		}
		if err := s.checkSize(d.Offer, d.Result); err != nil {
			return err
		}
		d.UpdatedAt = s.clock()
		out = d
		return s.putDelegation(txn, d, &old)
	})
	return out, err
}

// checkImmutable refuses a callback's change to a field that is part of a
// delegation's identity, is indexed, or moves only through Transition.
func checkImmutable(old, d Delegation) error {
	var field string
	switch {
	case d.ID != old.ID:
		field = "ID"
	case d.Role != old.Role:
		field = "Role"
	case d.Parent != old.Parent:
		field = "Parent"
	case d.ContextID != old.ContextID:
		field = "ContextID"
	case !d.CreatedAt.Equal(old.CreatedAt):
		field = "CreatedAt"
	case d.State != old.State:
		field = "State (use Transition)"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s: callback changed %s", ErrInvalid, dlgName(old.Role, old.ID), field)
}

// DelegationFilter selects delegations; nil and empty fields match all.
type DelegationFilter struct {
	Role   *Role
	States []protocol.State
	// Parent selects the children of one delegation; a pointer to the zero
	// ID selects root delegations.
	Parent *protocol.DelegationID
	// Limit > 0 keeps only the newest Limit matches.
	Limit int
	// Since, when set, keeps only delegations created at or after it.
	Since time.Time
	// Listing reads each delegation's record, and its Result only when
	// that is stored in at most ListResultMax bytes (ResultLeftOut says
	// when it is not), never its Offer: what a listing of many delegations
	// shows, without reading the files of their large documents. Unset,
	// every delegation comes with its Offer and Result.
	Listing bool
}

// ListResultMax is the largest result a listing (DelegationFilter.Listing)
// reads.
const ListResultMax = 64 << 10

func (f DelegationFilter) match(d Delegation) bool {
	return (f.Role == nil || *f.Role == d.Role) &&
		(len(f.States) == 0 || slices.Contains(f.States, d.State)) &&
		(f.Parent == nil || *f.Parent == d.Parent) &&
		(f.Since.IsZero() || !d.CreatedAt.Before(f.Since))
}

// ListDelegations returns the delegations matching f, oldest first (by
// CreatedAt, then role and ID).
func (s *Store) ListDelegations(f DelegationFilter) ([]Delegation, error) {
	var out []Delegation
	err := s.view(func(txn *wtxn) error {
		// The parent index narrows the scan to one delegation's children;
		// otherwise walk the creation index newest first, so a Limit stops
		// the walk early instead of decoding the whole history.
		prefix, reverse := []byte(prefixIdxCreated), true
		if f.Parent != nil {
			prefix, reverse = parentIdxPrefix(*f.Parent), false
		}
		return scanPrefix(txn, prefix, nil, reverse, func(item *badger.Item) error {
			role, id, ok := parseDlgSuffix(item.Key())
			if !ok {
				return fmt.Errorf("%w: index key %q", ErrCorrupt, item.Key())
			}
			if f.Role != nil && *f.Role != role {
				return nil
			}
			blobs := allBlobs
			if f.Listing {
				blobs = smallResult
			}
			d, err := s.getDelegation(txn, role, id, blobs)
			if err != nil {
				return fmt.Errorf("store: index %q: %w", item.Key(), err)
			}
			if reverse && !f.Since.IsZero() && d.CreatedAt.Before(f.Since) {
				return errStop // newest first: everything after is older
			}
			if f.match(d) {
				out = append(out, d)
			}
			if reverse && f.Limit > 0 && len(out) == f.Limit {
				return errStop
			}
			return nil
		})
	})
	slices.SortFunc(out, func(a, b Delegation) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt),
			cmp.Compare(a.Role.String(), b.Role.String()),
			bytes.Compare(a.ID[:], b.ID[:]))
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[len(out)-f.Limit:]
	}
	return out, err
}

// Children returns the delegations whose Parent is parent, under either
// role, oldest first. Children of the zero ID are the roots.
func (s *Store) Children(parent protocol.DelegationID) ([]Delegation, error) {
	return s.ListDelegations(DelegationFilter{Parent: &parent})
}
