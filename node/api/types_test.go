package api

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// The API's enums are typed values that travel as their names: the JSON a
// script sees is unchanged, and a name the node does not know is refused
// while decoding rather than passed along as a string.
func TestEnumsTravelAsNames(t *testing.T) {
	out, err := json.Marshal(Delegation{Role: RoleProvider, State: StateCompleted})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"role":"provider"`, `"state":"completed"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s lacks %s", out, want)
		}
	}
	out, err = json.Marshal(Peer{Trust: Verified, Access: AccessDeny})
	if err != nil || !strings.Contains(string(out), `"trust":"verified","access":"deny"`) {
		t.Errorf("peer JSON %s (%v), want trust and access by name", out, err)
	}

	var ch PeerChange
	if err := json.Unmarshal([]byte(`{"trust":"trusted"}`), &ch); err != nil || ch.Trust == nil || *ch.Trust != Trusted || ch.Access != nil {
		t.Errorf("PeerChange from {trust: trusted}: %+v, %v", ch, err)
	}
	for _, body := range []string{`{"trust":"friends"}`, `{"access":"maybe"}`, `{"trust":2}`} {
		if err := json.Unmarshal([]byte(body), &PeerChange{}); err == nil {
			t.Errorf("PeerChange from %s: no error", body)
		}
	}
	if _, err := ParseTrust("Verified"); err == nil || !strings.Contains(err.Error(), "want untrusted, verified or trusted") {
		t.Errorf("ParseTrust(Verified) = %v, want the allowed levels", err)
	}
}

func TestListQueryStates(t *testing.T) {
	st, err := ParseState("running")
	if err != nil {
		t.Fatal(err)
	}
	q := ListQuery{Limit: 5, States: []State{StateCompleted, st}}
	got, err := ParseListQuery(q.Values())
	if err != nil || !slices.Equal(got.States, q.States) || got.Limit != 5 {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, q)
	}
	if _, err := ParseListQuery(url.Values{"state": {"done"}}); err == nil || err.Error() != `state "done": not a delegation state` {
		t.Errorf("state done: %v", err)
	}
}
