package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/protocol"
)

// Delegation and event records, the store's hot path, are binary (schema
// version 2): a delegation's record is read and rewritten by every
// transition and an event is written per status, so JSON's reflection and
// the base64 it gives event data (partial output, a third larger) cost more
// than the rest of a commit. The other records stay JSON (codec.go).
//
// A binary record starts with its codec version, recordV1, a byte no JSON
// document starts with, so a record written as JSON by schema version 1
// still reads (decodeDelegationRecord, decodeEventRecord): the migration
// to version 2 (migrate.go) can stop half way and run again. Fields follow
// in a fixed order: integers as (zigzag) uvarints, strings and byte strings
// length-prefixed, IDs as their 16 bytes, enums as their text form (as in
// JSON: reordering a Go const block must not change what is on disk). An
// event's data is last and is the rest of the record, raw. Records are
// decoded strictly: a short record, a length past the end, an unknown
// version or trailing bytes are ErrCorrupt, never a panic (see
// FuzzDecodeDelegationRecord, FuzzDecodeEventRecord).
//
// Delegation records are written as version 2 (recordV2, schema version
// 4): the same fields, with the peer as its binary ID rather than its
// base58 text, whose encoding and decoding cost about 2% of a delegation's
// CPU. Version 1 records still read, and each is rewritten as version 2 the
// next time it changes, so no record needs converting at open.
const (
	recordV1 = 0x01
	recordV2 = 0x02
)

// recordWriter appends a record's fields.
type recordWriter struct{ b []byte }

func (w *recordWriter) uvarint(n uint64) { w.b = binary.AppendUvarint(w.b, n) }
func (w *recordWriter) varint(n int64)   { w.b = binary.AppendVarint(w.b, n) }
func (w *recordWriter) bytes(b []byte)   { w.uvarint(uint64(len(b))); w.b = append(w.b, b...) }
func (w *recordWriter) str(s string)     { w.uvarint(uint64(len(s))); w.b = append(w.b, s...) }
func (w *recordWriter) id(id protocol.DelegationID) {
	w.b = append(w.b, id[:]...)
}

func (w *recordWriter) bool(v bool) {
	if v {
		w.b = append(w.b, 1)
	} else {
		w.b = append(w.b, 0)
	}
}

func (w *recordWriter) text(m interface{ MarshalText() ([]byte, error) }) error {
	t, err := m.MarshalText()
	if err != nil {
		return err
	}
	w.bytes(t)
	return nil
}

// recordReader reads a record's fields; the first error sticks, and every
// later read returns zero values.
type recordReader struct {
	b   []byte
	err error
}

var errShort = errors.New("record ends early")

func (r *recordReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

func (r *recordReader) uvarint() uint64 {
	n, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.fail(errShort)
		return 0
	}
	r.b = r.b[k:]
	return n
}

func (r *recordReader) varint() int64 {
	n, k := binary.Varint(r.b)
	if k <= 0 {
		r.fail(errShort)
		return 0
	}
	r.b = r.b[k:]
	return n
}

func (r *recordReader) take(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.fail(errShort)
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *recordReader) bytes() []byte { return r.take(r.uvarint()) }
func (r *recordReader) str() string   { return string(r.bytes()) }

func (r *recordReader) id() protocol.DelegationID {
	var id protocol.DelegationID
	copy(id[:], r.take(uint64(len(id))))
	return id
}

func (r *recordReader) bool() bool {
	b := r.take(1)
	if len(b) == 1 && b[0] > 1 {
		r.fail(fmt.Errorf("boolean byte %d", b[0]))
	}
	return len(b) == 1 && b[0] == 1
}

func (r *recordReader) text(u interface{ UnmarshalText([]byte) error }) {
	t := r.bytes()
	if r.err != nil {
		return
	}
	if err := u.UnmarshalText(t); err != nil {
		r.fail(err)
	}
}

// end checks that the record was read whole.
func (r *recordReader) end(what string) error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("%w: decode %s: %v", ErrCorrupt, what, r.err)
	}
	return nil
}

func (r delegationRecord) encode() ([]byte, error) {
	w := recordWriter{b: make([]byte, 0, 128+len(r.peer)+len(r.ContextID)+len(r.Profile)+len(r.Reason))}
	w.b = append(w.b, recordV2)
	w.id(r.ID)
	if err := w.text(r.Role); err != nil {
		return nil, err
	}
	w.str(string(r.peer))
	w.bool(r.Remote)
	w.id(r.Parent)
	w.str(r.ContextID)
	w.str(r.Profile)
	if err := w.text(r.State); err != nil {
		return nil, err
	}
	w.str(r.Reason)
	w.uvarint(r.BudgetTokens)
	w.uvarint(r.Usage.Prompt)
	w.uvarint(r.Usage.Completion)
	w.uvarint(r.Usage.Total)
	w.varint(r.CreatedAt)
	w.varint(r.UpdatedAt)
	w.varint(r.Deadline)
	return w.b, nil
}

// decodeDelegationRecord reads a binary record (version 1 or 2), or a JSON
// one written by schema version 1. The peer comes out as an ID, whichever
// form it was stored in.
func decodeDelegationRecord(b []byte, what string) (delegationRecord, error) {
	var rec delegationRecord
	if len(b) > 0 && b[0] == '{' {
		if err := decodeJSON(b, &rec, what); err != nil {
			return rec, err
		}
		return rec, rec.peerFromText(what)
	}
	if len(b) == 0 || (b[0] != recordV1 && b[0] != recordV2) {
		return rec, fmt.Errorf("%w: decode %s: unknown record version", ErrCorrupt, what)
	}
	r := recordReader{b: b[1:]}
	rec.ID = r.id()
	r.text(&rec.Role)
	if b[0] == recordV1 {
		rec.Peer = r.str()
	} else if raw := r.bytes(); len(raw) > 0 && r.err == nil {
		id, err := peer.IDFromBytes(raw)
		if err != nil {
			r.fail(fmt.Errorf("peer: %v", err))
		}
		rec.peer = id
	}
	rec.Remote = r.bool()
	rec.Parent = r.id()
	rec.ContextID = r.str()
	rec.Profile = r.str()
	r.text(&rec.State)
	rec.Reason = r.str()
	rec.BudgetTokens = r.uvarint()
	rec.Usage.Prompt = r.uvarint()
	rec.Usage.Completion = r.uvarint()
	rec.Usage.Total = r.uvarint()
	rec.CreatedAt = r.varint()
	rec.UpdatedAt = r.varint()
	rec.Deadline = r.varint()
	if err := r.end(what); err != nil {
		return rec, err
	}
	return rec, rec.peerFromText(what)
}

// peerFromText turns the base58 peer of a version 1 or JSON record into
// the ID.
func (r *delegationRecord) peerFromText(what string) error {
	if r.Peer == "" {
		return nil
	}
	id, err := peer.Decode(r.Peer)
	if err != nil {
		return fmt.Errorf("%w: decode %s: peer %q: %v", ErrCorrupt, what, r.Peer, err)
	}
	r.peer, r.Peer = id, ""
	return nil
}

func (r eventRecord) encode() ([]byte, error) {
	w := recordWriter{b: make([]byte, 0, 48+len(r.Type)+len(r.Data))}
	w.b = append(w.b, recordV1)
	w.uvarint(r.Seq)
	w.varint(r.At)
	w.str(r.Type)
	if err := w.text(r.State); err != nil {
		return nil, err
	}
	w.b = append(w.b, r.Data...)
	return w.b, nil
}

// decodeEventRecord reads a binary event, or a JSON one written by schema
// version 1. Data is a copy: b may be badger's, valid only for a moment.
func decodeEventRecord(b []byte, what string) (eventRecord, error) {
	var rec eventRecord
	if len(b) > 0 && b[0] == '{' {
		return rec, decodeJSON(b, &rec, what)
	}
	if len(b) == 0 || b[0] != recordV1 {
		return rec, fmt.Errorf("%w: decode %s: unknown record version", ErrCorrupt, what)
	}
	r := recordReader{b: b[1:]}
	rec.Seq = r.uvarint()
	rec.At = r.varint()
	rec.Type = r.str()
	r.text(&rec.State)
	if r.err == nil && len(r.b) > 0 {
		rec.Data = append([]byte(nil), r.b...)
	}
	r.b = nil
	return rec, r.end(what)
}

// setRecord writes an encoded record.
func setRecord(txn *wtxn, key []byte, enc func() ([]byte, error), what string) error {
	b, err := enc()
	if err != nil {
		return fmt.Errorf("store: encode %s: %w", what, err)
	}
	if err := txn.Set(key, b); err != nil {
		return fmt.Errorf("store: write %s: %w", what, err)
	}
	return nil
}
