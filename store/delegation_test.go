package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kithmesh/kith/protocol"
)

func TestCreateAndGetDelegation(t *testing.T) {
	clk := newFakeClock()
	s, _ := openTest(t, Options{Now: clk.Now})
	id := protocol.NewDelegationID()

	_, err := s.GetDelegation(RoleRequester, id)
	wantErr(t, err, ErrNotFound)

	for name, d := range map[string]Delegation{
		"zero id":     {Role: RoleRequester},
		"zero role":   {ID: id},
		"bad state":   {ID: id, Role: RoleRequester, State: protocol.State(99)},
		"bad peer":    {ID: id, Role: RoleRequester, Peer: "not a multihash"},
		"long ctx id": {ID: id, Role: RoleRequester, ContextID: protocol.ContextID(strings.Repeat("x", protocol.MaxContextIDLen+1))},
	} {
		if err := s.CreateDelegation(d); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: CreateDelegation = %v, want ErrInvalid", name, err)
		}
	}

	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Profile: "echo"}))
	wantErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester}), ErrExists)

	d, err := s.GetDelegation(RoleRequester, id)
	mustNoErr(t, err)
	if d.State != protocol.StateOffered || !d.CreatedAt.Equal(clk.Now()) || !d.UpdatedAt.Equal(d.CreatedAt) ||
		d.Profile != "echo" || d.LastSeq != 0 {
		t.Errorf("created delegation = %+v, want offered, created and updated now, no events", d)
	}

	// The same ID under the other role is a different record (a node that
	// delegates to itself over the network).
	_, err = s.GetDelegation(RoleProvider, id)
	wantErr(t, err, ErrNotFound)
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Profile: "echo"}))
	_, err = s.Transition(RoleProvider, id, protocol.StateRejected, Event{}, nil)
	mustNoErr(t, err)
	d, _ = s.GetDelegation(RoleRequester, id)
	if d.State != protocol.StateOffered {
		t.Errorf("requester side moved with the provider side: %v", d.State)
	}
	if ev, _ := s.Events(RoleRequester, id, 0); len(ev) != 0 {
		t.Errorf("requester side has the provider's events: %+v", ev)
	}
}

func TestTransition(t *testing.T) {
	clk := newFakeClock()
	s, _ := openTest(t, Options{Now: clk.Now})
	id := protocol.NewDelegationID()
	_, err := s.Transition(RoleRequester, id, protocol.StateAccepted, Event{}, nil)
	wantErr(t, err, ErrNotFound)

	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester}))
	_, err = s.Transition(RoleRequester, id, protocol.StateUnknown, Event{}, nil)
	wantErr(t, err, ErrInvalid)

	clk.Add(time.Second)
	d, err := s.Transition(RoleRequester, id, protocol.StateAccepted, Event{}, nil)
	mustNoErr(t, err)
	if d.State != protocol.StateAccepted || !d.UpdatedAt.Equal(clk.Now()) || d.LastSeq != 1 {
		t.Errorf("after accept: %+v", d)
	}
	_, err = s.Transition(RoleRequester, id, protocol.StateRunning, Event{Type: "started", Data: []byte("x")}, nil)
	mustNoErr(t, err)
	seq, err := s.AppendEvent(RoleRequester, id, Event{Type: "progress", Data: []byte("half")})
	mustNoErr(t, err)
	if seq != 3 {
		t.Errorf("AppendEvent seq = %d, want 3", seq)
	}
	_, err = s.AppendEvent(RoleRequester, id, Event{})
	wantErr(t, err, ErrInvalid)

	// mutate may not touch the state or identity; nothing is written then.
	for name, bad := range map[string]func(*Delegation){
		"state":   func(d *Delegation) { d.State = protocol.StateCompleted },
		"parent":  func(d *Delegation) { d.Parent = protocol.NewDelegationID() },
		"context": func(d *Delegation) { d.ContextID = "other" },
	} {
		if _, err := s.Transition(RoleRequester, id, protocol.StateCompleted, Event{}, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("mutate changing %s: %v, want ErrInvalid", name, err)
		}
	}

	d, err = s.Transition(RoleRequester, id, protocol.StateCompleted, Event{Data: []byte("result")}, func(d *Delegation) {
		d.Usage = Usage{Prompt: 1, Completion: 2, Total: 3}
		d.Result = []byte("R")
	})
	mustNoErr(t, err)
	if d.State != protocol.StateCompleted || d.Usage.Total != 3 || string(d.Result) != "R" || d.LastSeq != 4 {
		t.Errorf("after complete: %+v", d)
	}

	_, err = s.Transition(RoleRequester, id, protocol.StateRunning, Event{}, nil)
	wantErr(t, err, ErrTerminal)
	if !strings.Contains(err.Error(), "already completed") {
		t.Errorf("ErrTerminal does not name the current state: %v", err)
	}
	_, err = s.Transition(RoleRequester, id, protocol.StateFailed, Event{}, nil)
	wantErr(t, err, ErrTerminal)

	evs, err := s.Events(RoleRequester, id, 0)
	mustNoErr(t, err)
	want := []struct {
		typ   string
		state protocol.State
		data  string
	}{
		{EventState, protocol.StateAccepted, ""},
		{"started", protocol.StateRunning, "x"},
		{"progress", protocol.StateRunning, "half"},
		{EventState, protocol.StateCompleted, "result"},
	}
	if len(evs) != len(want) {
		t.Fatalf("events = %+v", evs)
	}
	for i, w := range want {
		e := evs[i]
		if e.Seq != uint64(i+1) || e.Type != w.typ || e.State != w.state || string(e.Data) != w.data || !e.At.Equal(clk.Now()) {
			t.Errorf("event %d = %+v, want %+v", i, e, w)
		}
	}
	after, err := s.Events(RoleRequester, id, 2)
	mustNoErr(t, err)
	if len(after) != 2 || after[0].Seq != 3 {
		t.Errorf("Events after 2 = %+v", after)
	}
	if none, _ := s.Events(RoleRequester, id, 4); len(none) != 0 {
		t.Errorf("Events after the last = %+v", none)
	}
	_, err = s.Events(RoleProvider, id, 0)
	wantErr(t, err, ErrNotFound)
}

func TestUpdateDelegation(t *testing.T) {
	clk := newFakeClock()
	s, _ := openTest(t, Options{Now: clk.Now})
	id := protocol.NewDelegationID()
	_, err := s.UpdateDelegation(RoleProvider, id, func(*Delegation) error { return nil })
	wantErr(t, err, ErrNotFound)
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, State: protocol.StateRunning}))

	_, err = s.UpdateDelegation(RoleProvider, id, func(d *Delegation) error { d.State = protocol.StateCompleted; return nil })
	wantErr(t, err, ErrInvalid)
	_, err = s.UpdateDelegation(RoleProvider, id, func(d *Delegation) error { d.CreatedAt = time.Now(); return nil })
	wantErr(t, err, ErrInvalid)

	clk.Add(time.Minute)
	d, err := s.UpdateDelegation(RoleProvider, id, func(d *Delegation) error {
		d.Reason = "slow"
		d.Deadline = clk.Now().Add(time.Hour)
		return nil
	})
	mustNoErr(t, err)
	if d.Reason != "slow" || !d.UpdatedAt.Equal(clk.Now()) || d.State != protocol.StateRunning {
		t.Errorf("after update = %+v", d)
	}

	// Allowed after the terminal state too: a result may be stored late.
	_, err = s.Transition(RoleProvider, id, protocol.StateFailed, Event{}, nil)
	mustNoErr(t, err)
	_, err = s.UpdateDelegation(RoleProvider, id, func(d *Delegation) error { d.Result = []byte("late"); return nil })
	mustNoErr(t, err)
	got, _ := s.GetDelegation(RoleProvider, id)
	if string(got.Result) != "late" || got.State != protocol.StateFailed {
		t.Errorf("after late update = %+v", got)
	}
}

func TestListDelegationsAndChildren(t *testing.T) {
	clk := newFakeClock()
	s, _ := openTest(t, Options{Now: clk.Now})
	root1, root2 := protocol.NewDelegationID(), protocol.NewDelegationID()
	var kids []protocol.DelegationID
	create := func(id, parent protocol.DelegationID, role Role) {
		t.Helper()
		clk.Add(time.Second)
		mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: role, Parent: parent}))
	}
	create(root1, protocol.DelegationID{}, RoleRequester)
	create(root2, protocol.DelegationID{}, RoleProvider)
	for i := range 3 {
		k := protocol.NewDelegationID()
		kids = append(kids, k)
		create(k, root1, []Role{RoleRequester, RoleProvider}[i%2])
	}
	_, err := s.Transition(RoleRequester, kids[0], protocol.StateCancelled, Event{}, nil)
	mustNoErr(t, err)

	ids := func(ds []Delegation) []protocol.DelegationID {
		out := make([]protocol.DelegationID, len(ds))
		for i, d := range ds {
			out[i] = d.ID
		}
		return out
	}
	eq := func(name string, got []Delegation, want ...protocol.DelegationID) {
		t.Helper()
		g := ids(got)
		if len(g) != len(want) {
			t.Errorf("%s: got %v, want %v", name, g, want)
			return
		}
		for i := range g {
			if g[i] != want[i] {
				t.Errorf("%s: got %v, want %v", name, g, want)
				return
			}
		}
	}

	all, err := s.ListDelegations(DelegationFilter{})
	mustNoErr(t, err)
	eq("all", all, root1, root2, kids[0], kids[1], kids[2])

	newest2, err := s.ListDelegations(DelegationFilter{Limit: 2})
	mustNoErr(t, err)
	eq("limit 2", newest2, kids[1], kids[2])

	prov := RoleProvider
	provs, err := s.ListDelegations(DelegationFilter{Role: &prov})
	mustNoErr(t, err)
	eq("providers", provs, root2, kids[1])

	live, err := s.ListDelegations(DelegationFilter{States: []protocol.State{protocol.StateOffered}, Limit: 10})
	mustNoErr(t, err)
	eq("offered", live, root1, root2, kids[1], kids[2])

	children, err := s.Children(root1)
	mustNoErr(t, err)
	eq("children", children, kids...)

	var zero protocol.DelegationID
	roots, err := s.ListDelegations(DelegationFilter{Parent: &zero})
	mustNoErr(t, err)
	eq("roots", roots, root1, root2)

	kidsLimited, err := s.ListDelegations(DelegationFilter{Parent: &root1, Limit: 1, Role: &prov})
	mustNoErr(t, err)
	eq("children, provider, limit 1", kidsLimited, kids[1])

	none, err := s.Children(kids[2])
	mustNoErr(t, err)
	eq("leaf", none)
}

// TestConcurrentAppendEvents: 32 writers × 50 events on one delegation get
// sequence numbers 1..1600 without gaps, and each writer's events keep
// their order.
func TestConcurrentAppendEvents(t *testing.T) {
	s, _ := openTest(t, Options{})
	id := protocol.NewDelegationID()
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, State: protocol.StateRunning}))

	const writers, each = 32, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			var last uint64
			for i := range each {
				data := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, uint32(w)), uint32(i))
				seq, err := s.AppendEvent(RoleProvider, id, Event{Type: "partial", Data: data})
				if err != nil {
					t.Error(err)
					return
				}
				if seq <= last {
					t.Errorf("writer %d got seq %d after %d", w, seq, last)
				}
				last = seq
			}
		})
	}
	wg.Wait()

	evs, err := s.Events(RoleProvider, id, 0)
	mustNoErr(t, err)
	if len(evs) != writers*each {
		t.Fatalf("%d events, want %d", len(evs), writers*each)
	}
	next := make([]uint32, writers)
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		w, n := binary.BigEndian.Uint32(e.Data), binary.BigEndian.Uint32(e.Data[4:])
		if n != next[w] {
			t.Fatalf("writer %d: event %d logged where %d was expected", w, n, next[w])
		}
		next[w]++
		if e.State != protocol.StateRunning {
			t.Errorf("event %d state %v, want running (the current state)", e.Seq, e.State)
		}
	}
	d, _ := s.GetDelegation(RoleProvider, id)
	if d.LastSeq != writers*each {
		t.Errorf("LastSeq = %d", d.LastSeq)
	}
}

// TestFirstTerminalWins races one goroutine per terminal state against each
// delegation, plus writers appending events; exactly one transition wins,
// the others get ErrTerminal, and the log holds exactly one terminal event,
// the winner's.
func TestFirstTerminalWins(t *testing.T) {
	s, _ := openTest(t, Options{})
	terminals := []protocol.State{
		protocol.StateCompleted, protocol.StateFailed, protocol.StateCancelled,
		protocol.StateExpired, protocol.StateRejected, protocol.StatePreempted,
	}
	for range 10 {
		id := protocol.NewDelegationID()
		mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester, State: protocol.StateRunning}))

		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []protocol.State
		)
		start := make(chan struct{})
		for _, to := range terminals {
			wg.Go(func() {
				<-start
				_, err := s.Transition(RoleRequester, id, to, Event{}, func(d *Delegation) { d.Reason = to.String() })
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, to)
					mu.Unlock()
				case !errors.Is(err, ErrTerminal):
					t.Errorf("Transition to %v: %v", to, err)
				}
			})
		}
		wg.Go(func() {
			<-start
			for range 5 {
				if _, err := s.AppendEvent(RoleRequester, id, Event{Type: "progress"}); err != nil {
					t.Error(err)
				}
			}
		})
		close(start)
		wg.Wait()

		if len(winners) != 1 {
			t.Fatalf("%d transitions won: %v", len(winners), winners)
		}
		d, err := s.GetDelegation(RoleRequester, id)
		mustNoErr(t, err)
		if d.State != winners[0] || d.Reason != winners[0].String() {
			t.Errorf("stored %v (reason %q), winner %v", d.State, d.Reason, winners[0])
		}
		evs, err := s.Events(RoleRequester, id, 0)
		mustNoErr(t, err)
		var terminalEvents int
		for i, e := range evs {
			if e.Seq != uint64(i+1) {
				t.Errorf("event %d has seq %d", i, e.Seq)
			}
			if e.Type == EventState {
				terminalEvents++
				if e.State != winners[0] {
					t.Errorf("state event for %v, winner %v", e.State, winners[0])
				}
			} else if terminalEvents > 0 && e.State != winners[0] {
				t.Errorf("event %d after the terminal one has state %v", e.Seq, e.State)
			}
		}
		if terminalEvents != 1 || len(evs) != 6 {
			t.Errorf("%d terminal events of %d, want 1 of 6", terminalEvents, len(evs))
		}
	}
}

func TestContexts(t *testing.T) {
	s, _ := openTest(t, Options{})
	_, err := s.GetContext("nope")
	wantErr(t, err, ErrNotFound)
	wantErr(t, s.AddToContext("", protocol.NewDelegationID()), ErrInvalid)
	wantErr(t, s.AddToContext("c", protocol.DelegationID{}), ErrInvalid)

	a, b := protocol.NewDelegationID(), protocol.NewDelegationID()
	mustNoErr(t, s.AddToContext("c", a))
	mustNoErr(t, s.AddToContext("c", a)) // idempotent
	mustNoErr(t, s.CreateDelegation(Delegation{ID: b, Role: RoleProvider, ContextID: "c"}))
	mustNoErr(t, s.CreateDelegation(Delegation{ID: b, Role: RoleRequester, ContextID: "c"}))

	c, err := s.GetContext("c")
	mustNoErr(t, err)
	if c.ID != "c" || len(c.Delegations) != 2 || c.Delegations[0] != a || c.Delegations[1] != b || c.CreatedAt.IsZero() {
		t.Errorf("context = %+v", c)
	}

	// Concurrent adds of distinct delegations all land.
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if err := s.AddToContext("busy", protocol.NewDelegationID()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	c, err = s.GetContext("busy")
	mustNoErr(t, err)
	if len(c.Delegations) != 16 {
		t.Errorf("busy context has %d delegations, want 16", len(c.Delegations))
	}
}

func TestRoleText(t *testing.T) {
	for _, r := range []Role{RoleRequester, RoleProvider} {
		b, err := r.MarshalText()
		mustNoErr(t, err)
		var got Role
		mustNoErr(t, got.UnmarshalText(b))
		if got != r {
			t.Errorf("round trip %v → %q → %v", r, b, got)
		}
	}
	if _, err := Role(0).MarshalText(); err == nil {
		t.Error("zero Role marshalled")
	}
}

// TestLargeValues: a Transition carrying a 1 MiB result and a 1 MiB event
// payload fits in one transaction (large values go to the value log),
// survives a reopen, and CollectGarbage runs after the record is rewritten,
// on a store that syncs (through its commit log) and on one that does not.
func TestLargeValues(t *testing.T) {
	id := protocol.NewDelegationID()
	big := func(b byte) []byte { return bytes.Repeat([]byte{b}, 1<<20) }
	for _, opts := range []Options{{NoSync: true}, {}} {
		s, dir := openTest(t, opts)
		mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleProvider, Offer: big('o')}))
		_, err := s.Transition(RoleProvider, id, protocol.StateRunning, Event{Data: big('e')}, nil)
		mustNoErr(t, err)
		_, err = s.Transition(RoleProvider, id, protocol.StateCompleted, Event{Data: big('f')}, func(d *Delegation) { d.Result = big('r') })
		mustNoErr(t, err)
		mustNoErr(t, s.CollectGarbage())

		s = reopen(t, s, dir, Options{})
		d, err := s.GetDelegation(RoleProvider, id)
		mustNoErr(t, err)
		if !bytes.Equal(d.Offer, big('o')) || !bytes.Equal(d.Result, big('r')) {
			t.Errorf("NoSync %v: large offer or result changed across reopen", opts.NoSync)
		}
		evs, err := s.Events(RoleProvider, id, 0)
		mustNoErr(t, err)
		if len(evs) != 2 || !bytes.Equal(evs[1].Data, big('f')) {
			t.Errorf("NoSync %v: large event payload changed across reopen", opts.NoSync)
		}
	}

	// In memory every value is inline: a value over the cap, or a transaction
	// whose values add up past badger's limit, is the store's ErrInvalid,
	// not a badger error with a hex dump.
	m, err := OpenInMemory(Options{})
	mustNoErr(t, err)
	defer m.Close()
	mustNoErr(t, m.CreateDelegation(Delegation{ID: id, Role: RoleProvider}))
	_, err = m.Transition(RoleProvider, id, protocol.StateRunning, Event{Data: big('e')}, nil)
	wantErr(t, err, ErrInvalid)
	half := func(b byte) []byte { return bytes.Repeat([]byte{b}, 512<<10) }
	_, err = m.Transition(RoleProvider, id, protocol.StateCompleted, Event{Data: half('e')}, func(d *Delegation) {
		d.Offer, d.Result = half('o'), half('r')
	})
	wantErr(t, err, ErrInvalid)
	if strings.Contains(err.Error(), "00000000") {
		t.Errorf("error carries badger's hex dump: %.200s", err)
	}
	d, err := m.GetDelegation(RoleProvider, id)
	mustNoErr(t, err)
	if d.State != protocol.StateOffered || d.Offer != nil || d.LastSeq != 0 {
		t.Errorf("refused transition changed the delegation: %+v", d)
	}
	mustNoErr(t, m.CollectGarbage())
}
