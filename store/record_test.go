package store

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/kithmesh/kith/protocol"
)

// TestMigrateJSONRecords opens a store written the schema version 1 way
// (every record JSON, written here directly as that code wrote them) and
// checks that it reads as it was, that its records are binary afterwards,
// and that the store says version 2.
func TestMigrateJSONRecords(t *testing.T) {
	s, dir := openTest(t, Options{})
	mustNoErr(t, s.Close())

	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	d := Delegation{
		ID: protocol.NewDelegationID(), Role: RoleRequester, Peer: newPeerID(t), Remote: true,
		ContextID: "conv-1", Profile: "echo", State: protocol.StateCompleted, Reason: "fine",
		BudgetTokens: 1000, Usage: Usage{Prompt: 1, Completion: 2, Total: 3},
		Offer: []byte("offer-bytes"), Result: []byte("result-bytes"),
		CreatedAt: created, UpdatedAt: created.Add(time.Second), Deadline: created.Add(time.Minute),
	}
	events := []Event{
		{Type: "accepted", State: protocol.StateAccepted, At: created, Data: []byte("accept\x00\xff")},
		{Type: "status", State: protocol.StateRunning, At: created.Add(time.Millisecond), Data: bytes.Repeat([]byte("p"), 300<<10)},
		{Type: "result", State: protocol.StateCompleted, At: created.Add(time.Second)},
	}
	bo := badgerOptions(dir, Options{})
	db, err := badger.Open(bo)
	mustNoErr(t, err)
	mustNoErr(t, db.Update(func(bt *badger.Txn) error {
		txn := &wtxn{Txn: bt} // nothing logged: a schema 1 store had no commit log
		mustNoErr(t, txn.Set([]byte(keySchema), be64(1)))
		rec := d.record()
		rec.Peer = d.Peer.String() // schema 1 wrote it as base58
		mustNoErr(t, setJSON(txn, delegationKey(d.Role, d.ID), rec, "delegation"))
		mustNoErr(t, txn.Set(blobKey(d.Role, d.ID, blobOffer), d.Offer))
		mustNoErr(t, txn.Set(blobKey(d.Role, d.ID, blobResult), d.Result))
		mustNoErr(t, txn.Set(parentIdxKey(d.Parent, d.Role, d.ID), []byte{1}))
		mustNoErr(t, txn.Set(createdIdxKey(nanos(d.CreatedAt), d.Role, d.ID), []byte{1}))
		mustNoErr(t, txn.Set(eventSeqKey(d.Role, d.ID), be64(uint64(len(events)))))
		for i, ev := range events {
			r := eventRecord{Seq: uint64(i + 1), At: nanos(ev.At), Type: ev.Type, State: ev.State, Data: ev.Data}
			mustNoErr(t, setJSON(txn, eventKey(d.Role, d.ID, r.Seq), r, "event"))
		}
		return nil
	}))
	mustNoErr(t, db.Close())

	s = openAt(t, dir, Options{})
	got, err := s.GetDelegation(d.Role, d.ID)
	mustNoErr(t, err)
	d.LastSeq = uint64(len(events))
	if !delegationsEqual(got, d) {
		t.Errorf("migrated delegation = %+v\nwant %+v", got, d)
	}
	evs, err := s.Events(d.Role, d.ID, 0)
	mustNoErr(t, err)
	if len(evs) != len(events) {
		t.Fatalf("%d events, want %d", len(evs), len(events))
	}
	for i, ev := range evs {
		want := events[i]
		want.Seq = uint64(i + 1)
		if !ev.At.Equal(want.At) || ev.Type != want.Type || ev.State != want.State || ev.Seq != want.Seq || !bytes.Equal(ev.Data, want.Data) {
			t.Errorf("event %d = %+v, want %+v", i, ev, want)
		}
	}
	mustNoErr(t, s.view(func(txn *wtxn) error {
		v, err := getUint64(txn, []byte(keySchema))
		if err != nil || v != schemaVersion {
			t.Errorf("schema version %d (err %v), want %d", v, err, schemaVersion)
		}
		for _, k := range [][]byte{delegationKey(d.Role, d.ID), eventKey(d.Role, d.ID, 1), eventKey(d.Role, d.ID, 2)} {
			item, err := txn.Get(k)
			mustNoErr(t, err)
			mustNoErr(t, item.Value(func(b []byte) error {
				if len(b) == 0 || (b[0] != recordV1 && b[0] != recordV2) {
					t.Errorf("%q is still not binary after the migration", k)
				}
				return nil
			}))
		}
		return nil
	}))
	// The migrated delegation moves on like any other.
	_, err = s.Transition(d.Role, d.ID, protocol.StateRunning, Event{}, nil)
	wantErr(t, err, ErrTerminal)
}

// TestDelegationRecordV1StillReads: a record written before version 2
// (the peer as base58 text) decodes to the same delegation, and is
// written back as version 2, with the peer's binary ID.
func TestDelegationRecordV1StillReads(t *testing.T) {
	d := Delegation{ID: protocol.NewDelegationID(), Role: RoleRequester, Peer: newPeerID(t), Remote: true,
		State: protocol.StateRunning, Profile: "echo", BudgetTokens: 9, CreatedAt: time.Unix(5, 0).UTC(), UpdatedAt: time.Unix(6, 0).UTC()}
	v2, err := d.record().encode()
	mustNoErr(t, err)
	if v2[0] != recordV2 || !bytes.Contains(v2, []byte(d.Peer)) {
		t.Fatalf("a new record is version %d, with the peer's ID bytes %v; want version 2, with them", v2[0], bytes.Contains(v2, []byte(d.Peer)))
	}
	// Version 1, as the encoder before version 2 wrote it: the same
	// fields, the peer as base58.
	w := recordWriter{}
	w.b = append(w.b, recordV1)
	w.id(d.ID)
	mustNoErr(t, w.text(d.Role))
	w.str(d.Peer.String())
	w.bool(d.Remote)
	w.id(d.Parent)
	w.str(string(d.ContextID))
	w.str(d.Profile)
	mustNoErr(t, w.text(d.State))
	w.str(d.Reason)
	for _, n := range []uint64{d.BudgetTokens, d.Usage.Prompt, d.Usage.Completion, d.Usage.Total} {
		w.uvarint(n)
	}
	for _, n := range []int64{nanos(d.CreatedAt), nanos(d.UpdatedAt), nanos(d.Deadline)} {
		w.varint(n)
	}
	for _, b := range [][]byte{w.b, v2} {
		r, err := decodeDelegationRecord(b, "test")
		mustNoErr(t, err)
		got, err := r.delegation()
		mustNoErr(t, err)
		if !reflect.DeepEqual(got, d) {
			t.Errorf("version %d record decodes to %+v, want %+v", b[0], got, d)
		}
		again, err := r.encode()
		mustNoErr(t, err)
		if !bytes.Equal(again, v2) {
			t.Errorf("version %d record is written back as %x, want %x", b[0], again, v2)
		}
	}
	// A version 1 record whose peer is not base58, or a version 2 one whose
	// peer bytes are no ID, is corrupt.
	bad := bytes.Replace(w.b, []byte(d.Peer.String()), []byte(strings.Repeat("0", len(d.Peer.String()))), 1)
	if _, err := decodeDelegationRecord(bad, "test"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version 1 record with peer 000…: %v, want ErrCorrupt", err)
	}
	bad = bytes.Replace(v2, []byte(d.Peer), bytes.Repeat([]byte{0xff}, len(d.Peer)), 1)
	if _, err := decodeDelegationRecord(bad, "test"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version 2 record with peer ff…: %v, want ErrCorrupt", err)
	}
}

func FuzzDecodeDelegationRecord(f *testing.F) {
	r := Delegation{ID: protocol.NewDelegationID(), Role: RoleProvider, State: protocol.StateRunning,
		ContextID: "c", Profile: "echo", Reason: "r", BudgetTokens: 7, CreatedAt: time.Unix(1, 2)}.record()
	b, err := r.encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte(`{"id":"00000000000000000000000000000001","role":"provider","state":"running"}`))
	f.Add([]byte{recordV1})
	f.Add([]byte{recordV2})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeDelegationRecord(b, "fuzz")
		if err != nil || b[0] == '{' {
			return
		}
		again, err := r.encode()
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		r2, err := decodeDelegationRecord(again, "fuzz")
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v, then %+v (%v)", r, r2, err)
		}
	})
}

func FuzzDecodeEventRecord(f *testing.F) {
	b, err := eventRecord{Seq: 3, At: 5, Type: "status", State: protocol.StateRunning, Data: []byte("partial")}.encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:4])
	f.Add([]byte(`{"seq":1,"at_ns":2,"type":"status","state":"running","data":"cGFydGlhbA=="}`))
	f.Add([]byte{recordV1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeEventRecord(b, "fuzz")
		if err != nil || b[0] == '{' {
			return
		}
		again, err := r.encode()
		if err != nil {
			t.Fatalf("decoded event does not encode: %v", err)
		}
		r2, err := decodeEventRecord(again, "fuzz")
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v, then %+v (%v)", r, r2, err)
		}
	})
}
