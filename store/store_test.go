package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/protocol"
)

// TestReopenKeepsEverything writes one of every record kind, closes the
// store and opens it again, as a node restart does.
func TestReopenKeepsEverything(t *testing.T) {
	clk := newFakeClock()
	opts := Options{Now: clk.Now}
	s, dir := openTest(t, opts)

	alice, bob := newPeerID(t), newPeerID(t)
	mustNoErr(t, s.PutPeer(Peer{ID: alice, Addrs: []string{"/ip4/127.0.0.1/tcp/4001"}, Sources: []string{"static"}, LastSeen: clk.Now()}))
	mustNoErr(t, s.SetTrust(alice, protocol.Trusted, "cli"))
	mustNoErr(t, s.SetAccess(bob, AccessDeny, "api"))

	root := Delegation{ID: protocol.NewDelegationID(), Role: RoleRequester, Peer: alice, Remote: true,
		ContextID: "conv-1", Profile: "echo", BudgetTokens: 1000, Offer: []byte("offer-bytes"),
		Deadline: clk.Now().Add(time.Minute)}
	mustNoErr(t, s.CreateDelegation(root))
	child := Delegation{ID: protocol.NewDelegationID(), Role: RoleProvider, Parent: root.ID, ContextID: "conv-1"}
	mustNoErr(t, s.CreateDelegation(child))
	_, err := s.Transition(RoleRequester, root.ID, protocol.StateAccepted, Event{}, nil)
	mustNoErr(t, err)
	_, err = s.AppendEvent(RoleRequester, root.ID, Event{Type: "progress", Data: []byte("50%")})
	mustNoErr(t, err)
	want, err := s.Transition(RoleRequester, root.ID, protocol.StateCompleted, Event{Data: []byte("done")}, func(d *Delegation) {
		d.Result = []byte("result-bytes")
		d.Usage = Usage{Prompt: 10, Completion: 20, Total: 30}
	})
	mustNoErr(t, err)
	want.Offer = root.Offer // a transition leaves the offer unread

	msg := crypto.MessageID{1, 2, 3}
	seen, err := s.CheckAndRemember(bob, msg, clk.Now().Add(time.Hour))
	mustNoErr(t, err)
	if seen {
		t.Fatal("first CheckAndRemember reported seen")
	}
	mustNoErr(t, s.PutMeta("dht/bootstrapped", []byte("yes")))

	peersBefore, err := s.ListPeers()
	mustNoErr(t, err)
	auditBefore, err := s.AuditLog(0)
	mustNoErr(t, err)
	eventsBefore, err := s.Events(RoleRequester, root.ID, 0)
	mustNoErr(t, err)

	s = reopen(t, s, dir, opts)

	peersAfter, err := s.ListPeers()
	mustNoErr(t, err)
	if len(peersAfter) != 2 || !peersEqual(peersBefore, peersAfter) {
		t.Errorf("peers after reopen = %+v, want %+v", peersAfter, peersBefore)
	}
	if p, _ := s.GetPeer(alice); p.Trust != protocol.Trusted || p.Addrs[0] != "/ip4/127.0.0.1/tcp/4001" {
		t.Errorf("alice after reopen = %+v", p)
	}
	auditAfter, err := s.AuditLog(0)
	mustNoErr(t, err)
	if len(auditAfter) != 2 || auditAfter[0] != auditBefore[0] || auditAfter[1] != auditBefore[1] {
		t.Errorf("audit after reopen = %+v, want %+v", auditAfter, auditBefore)
	}
	got, err := s.GetDelegation(RoleRequester, root.ID)
	mustNoErr(t, err)
	if !delegationsEqual(got, want) {
		t.Errorf("delegation after reopen = %+v, want %+v", got, want)
	}
	eventsAfter, err := s.Events(RoleRequester, root.ID, 0)
	mustNoErr(t, err)
	if len(eventsAfter) != 3 || len(eventsBefore) != 3 {
		t.Fatalf("events after reopen = %+v, before = %+v", eventsAfter, eventsBefore)
	}
	for i := range eventsAfter {
		a, b := eventsAfter[i], eventsBefore[i]
		if a.Seq != uint64(i+1) || a.Seq != b.Seq || a.Type != b.Type || a.State != b.State || !a.At.Equal(b.At) || !bytes.Equal(a.Data, b.Data) {
			t.Errorf("event %d after reopen = %+v, want %+v", i, a, b)
		}
	}
	ctx, err := s.GetContext("conv-1")
	mustNoErr(t, err)
	if len(ctx.Delegations) != 2 || ctx.Delegations[0] != root.ID || ctx.Delegations[1] != child.ID {
		t.Errorf("context after reopen = %+v", ctx)
	}
	kids, err := s.Children(root.ID)
	mustNoErr(t, err)
	if len(kids) != 1 || kids[0].ID != child.ID || kids[0].Role != RoleProvider {
		t.Errorf("children after reopen = %+v", kids)
	}
	seen, err = s.CheckAndRemember(bob, msg, clk.Now().Add(time.Hour))
	mustNoErr(t, err)
	if !seen {
		t.Error("replay entry lost on reopen: message accepted twice")
	}
	v, err := s.GetMeta("dht/bootstrapped")
	mustNoErr(t, err)
	if string(v) != "yes" {
		t.Errorf("meta after reopen = %q", v)
	}
}

func peersEqual(a, b []Peer) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.ID != y.ID || x.Trust != y.Trust || x.Access != y.Access || !x.AddedAt.Equal(y.AddedAt) ||
			!x.LastSeen.Equal(y.LastSeen) || strings.Join(x.Addrs, ",") != strings.Join(y.Addrs, ",") ||
			strings.Join(x.Sources, ",") != strings.Join(y.Sources, ",") {
			return false
		}
	}
	return true
}

func delegationsEqual(a, b Delegation) bool {
	return a.ID == b.ID && a.Role == b.Role && a.Peer == b.Peer && a.Remote == b.Remote &&
		a.Parent == b.Parent && a.ContextID == b.ContextID && a.Profile == b.Profile &&
		a.State == b.State && a.Reason == b.Reason && a.BudgetTokens == b.BudgetTokens &&
		a.Usage == b.Usage && bytes.Equal(a.Offer, b.Offer) && bytes.Equal(a.Result, b.Result) &&
		a.CreatedAt.Equal(b.CreatedAt) && a.UpdatedAt.Equal(b.UpdatedAt) && a.Deadline.Equal(b.Deadline) &&
		a.LastSeq == b.LastSeq
}

// setSchemaVersion is the test hook that plays a newer kith: it stamps the
// database with schema version v.
func setSchemaVersion(t *testing.T, s *Store, v uint64) {
	t.Helper()
	mustNoErr(t, s.update(nil, func(txn *wtxn) error {
		return txn.Set([]byte(keySchema), be64(v))
	}))
}

func TestSchemaVersion(t *testing.T) {
	s, dir := openTest(t, Options{})
	mustNoErr(t, s.view(func(txn *wtxn) error {
		v, err := getUint64(txn, []byte(keySchema))
		if v != schemaVersion {
			t.Errorf("fresh store schema version = %d, want %d", v, schemaVersion)
		}
		return err
	}))
	mustNoErr(t, s.PutMeta("k", []byte("v")))

	// Reopening the current version works.
	s = reopen(t, s, dir, Options{})

	setSchemaVersion(t, s, schemaVersion+1)
	mustNoErr(t, s.Close())
	_, err := Open(dir, Options{})
	wantErr(t, err, ErrSchemaTooNew)
	if !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", schemaVersion+1)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("up to %d", schemaVersion)) {
		t.Errorf("error does not say which versions: %v", err)
	}

	// The refused open changed nothing: still too new, data still there.
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	mustNoErr(t, err)
	defer db.Close()
	mustNoErr(t, db.View(func(txn *badger.Txn) error {
		v, err := getUint64(&wtxn{Txn: txn}, []byte(keySchema))
		if v != schemaVersion+1 {
			t.Errorf("schema version after refused open = %d", v)
		}
		_, gerr := txn.Get(metaKey("k"))
		return errors.Join(err, gerr)
	}))
}

func TestSchemaMissingOnNonEmptyDatabase(t *testing.T) {
	dir := t.TempDir()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	mustNoErr(t, err)
	mustNoErr(t, db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("something"), []byte("else")) }))
	mustNoErr(t, db.Close())

	_, err = Open(dir, Options{})
	wantErr(t, err, ErrCorrupt)
	if !strings.Contains(err.Error(), "no schema version") {
		t.Errorf("error does not say what is wrong: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s, _ := openTest(t, Options{})
	mustNoErr(t, s.Close())
	wantErr(t, s.Close(), ErrClosed)
	_, err := s.GetPeer(newPeerID(t))
	wantErr(t, err, ErrClosed)
	wantErr(t, s.PutMeta("k", nil), ErrClosed)
	_, err = s.CheckAndRemember(newPeerID(t), crypto.MessageID{1}, time.Now().Add(time.Minute))
	wantErr(t, err, ErrClosed)
}

// TestCloseWaitsForWriters closes while writers are busy: every write either
// lands or fails with ErrClosed, never panics inside badger.
func TestCloseWaitsForWriters(t *testing.T) {
	s, _ := openTest(t, Options{NoSync: true})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := 0; ; j++ {
				err := s.PutMeta(strings.Repeat("k", i+1), []byte{byte(j)})
				if err != nil {
					wantErr(t, err, ErrClosed)
					return
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	mustNoErr(t, s.Close())
	wg.Wait()
}

// TestInMemory uses OpenInMemory, the mode meant for other packages' unit
// tests; it must behave like the on-disk store for the API.
func TestInMemory(t *testing.T) {
	s, err := OpenInMemory(Options{})
	mustNoErr(t, err)
	defer s.Close()
	mustNoErr(t, s.PutMeta("a", []byte("b")))
	v, err := s.GetMeta("a")
	mustNoErr(t, err)
	if string(v) != "b" {
		t.Fatalf("GetMeta = %q", v)
	}
}

func TestMeta(t *testing.T) {
	s, _ := openTest(t, Options{})
	_, err := s.GetMeta("missing")
	wantErr(t, err, ErrNotFound)
	wantErr(t, s.PutMeta("", []byte("x")), ErrInvalid)

	buf := []byte("one")
	mustNoErr(t, s.PutMeta("k", buf))
	buf[0] = 'X' // the store must have copied it
	v, err := s.GetMeta("k")
	mustNoErr(t, err)
	if string(v) != "one" {
		t.Fatalf("GetMeta = %q, want one", v)
	}
}

// captureHandler records log records, with the attributes of With, into a
// sink shared by the handlers derived from it.
type captureHandler struct {
	sink *captureSink
	with []slog.Attr
}

type captureSink struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.with...)
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	h.sink.recs = append(h.sink.recs, r)
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{sink: h.sink, with: append(slices.Clone(h.with), as...)}
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }

func TestLoggerRouted(t *testing.T) {
	sink := &captureSink{}
	s, _ := openTest(t, Options{Logger: slog.New(&captureHandler{sink: sink})})
	mustNoErr(t, s.Close())

	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.recs) == 0 {
		t.Fatal("badger logged nothing through the injected logger")
	}
	for _, r := range sink.recs {
		if r.Message != "badger" {
			t.Errorf("message %q, want the constant \"badger\"", r.Message)
		}
		var component string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "component" {
				component = a.Value.String()
			}
			return true
		})
		if component != "store" {
			t.Errorf("record without component=store: %v", r)
		}
	}
}

func TestBatchedEventsLandWithCreateAndTransition(t *testing.T) {
	s, _ := openTest(t, Options{})
	id := protocol.NewDelegationID()
	err := s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Profile: "p", State: protocol.StateRunning},
		Event{Type: "accepted", State: protocol.StateAccepted, Data: []byte("a")},
		Event{Type: "status", Data: []byte("r")})
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.TransitionAfter(RoleProvider, id, []Event{{Type: "status", Data: []byte("p")}}, protocol.StateCompleted, Event{Type: "result"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.LastSeq != 4 || d.State != protocol.StateCompleted {
		t.Fatalf("last seq %d state %s", d.LastSeq, d.State)
	}
	evs, err := s.Events(RoleProvider, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		typ   string
		state protocol.State
	}{{"accepted", protocol.StateAccepted}, {"status", protocol.StateRunning}, {"status", protocol.StateRunning}, {"result", protocol.StateCompleted}}
	if len(evs) != len(want) {
		t.Fatalf("%d events", len(evs))
	}
	for i, w := range want {
		if evs[i].Seq != uint64(i+1) || evs[i].Type != w.typ || evs[i].State != w.state {
			t.Fatalf("event %d: %+v, want %+v", i, evs[i], w)
		}
	}
	// A batch that meets a terminal state writes nothing.
	if _, err := s.TransitionAfter(RoleProvider, id, []Event{{Type: "status"}}, protocol.StateFailed, Event{}, nil); !errors.Is(err, ErrTerminal) {
		t.Fatalf("got %v", err)
	}
	if evs, _ := s.Events(RoleProvider, id, 0); len(evs) != 4 {
		t.Fatalf("rejected batch left %d events", len(evs))
	}
}
