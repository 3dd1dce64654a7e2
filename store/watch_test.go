package store

import (
	"testing"

	"github.com/kithmesh/kith/protocol"
)

func TestWatch(t *testing.T) {
	s, _ := openTest(t, Options{})
	ch, cancel := s.Watch()
	id := protocol.NewDelegationID()
	mustNoErr(t, s.CreateDelegation(Delegation{ID: id, Role: RoleRequester, Profile: "echo"}, Event{Type: "offered"}))
	_, err := s.AppendEvent(RoleRequester, id, Event{Type: "status", Data: []byte("x")})
	mustNoErr(t, err)
	_, err = s.TransitionAfter(RoleRequester, id, []Event{{Type: "note"}}, protocol.StateCompleted, Event{Type: "result"}, nil)
	mustNoErr(t, err)
	// A failed transition (already terminal) tells nobody.
	_, err = s.Transition(RoleRequester, id, protocol.StateFailed, Event{}, nil)
	wantErr(t, err, ErrTerminal)
	cancel()
	want := []struct {
		typ   string
		seq   uint64
		state protocol.State
	}{{"offered", 1, protocol.StateOffered}, {"status", 2, protocol.StateOffered}, {"note", 3, protocol.StateOffered}, {"result", 4, protocol.StateCompleted}}
	if len(ch) != len(want) {
		t.Fatalf("%d changes, want %d", len(ch), len(want))
	}
	for _, w := range want {
		c := <-ch
		if c.ID != id || c.Role != RoleRequester || c.Event.Type != w.typ || c.Event.Seq != w.seq || c.Event.State != w.state || c.Event.Data != nil {
			t.Fatalf("change %+v, want %+v", c, w)
		}
	}
}
