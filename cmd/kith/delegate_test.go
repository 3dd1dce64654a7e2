package main

import (
	"strings"
	"testing"

	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/protocol"
)

// A large streamed output is cut on the status line (the result goes to
// stdout whole); a short one is shown as it is.
func TestPartialLine(t *testing.T) {
	if got := partialLine("hello"); got != `"hello"` {
		t.Fatalf("short partial: %s", got)
	}
	long := strings.Repeat("é", 200_000) // 400 KB, two bytes a rune
	got := partialLine(long)
	if len(got) > 200 || !strings.HasSuffix(got, "… (400000 bytes)") || strings.Contains(got, "\\x") {
		t.Fatalf("long partial shown as %d bytes: %.120s", len(got), got)
	}
}

// A status line shows the progress the provider reported, in percent, and
// the output streamed with it; a status without either shows neither.
func TestEventLine(t *testing.T) {
	for _, c := range []struct {
		ev   api.Event
		want string
	}{
		{api.Event{State: protocol.StateRunning, Type: "status", Progress: 250, Partial: "half"}, `[running] status 25% "half"`},
		{api.Event{State: protocol.StateRunning, Type: "status", Progress: 1000}, `[running] status 100%`},
		{api.Event{State: protocol.StateRunning, Type: "status"}, `[running] status`},
	} {
		if got := eventLine(c.ev); got != c.want {
			t.Errorf("eventLine(%+v) = %q, want %q", c.ev, got, c.want)
		}
	}
}
