package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kithmesh/kith/node/api"
)

// TestA2AInteropMultiTurn (named so that .ci/run's must-not-skip interop run
// takes it): a multi-turn delegation over the mesh on real daemons.
// B's profile forwards to an agent built with the A2A JavaScript SDK's
// server that asks back; A delegates to it, once from the CLI (kith
// delegate stops at the question, kith tasks reply answers it) and once
// through A's A2A gateway with @a2a-js/sdk's client (INPUT_REQUIRED, then a
// SendMessage naming the task). Each ends COMPLETED with a proof over both
// turns.
func TestA2AInteropMultiTurn(t *testing.T) {
	nodeBin := needInterop(t)
	agentURL, _ := jsAgent(t, nodeBin, "1.0")
	a, b := pair(t, fmt.Sprintf(`
[[profiles]]
name = "js-ask"
executor = "a2a"
url = %q
min_trust = "untrusted"
`, agentURL))

	waitFor := func(id, state string) api.Delegation {
		t.Helper()
		deadline := time.Now().Add(stateWait)
		for {
			d := showJSON(t, a, id)
			if d.State.String() == state {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("A's delegation %s is %s (%s), want %s", id, d.State, d.Reason, state)
			}
			time.Sleep(pollEvery)
		}
	}
	turns := func(id string) {
		t.Helper()
		mustVerify(t, a, id, b, "completed")
		if r := a.kith("tasks", "verify", id); !strings.Contains(r.stdout, "turns      2 ") {
			t.Fatalf("the proof of %s does not cover two turns: %v", id, r)
		}
	}

	t.Run("cli", func(t *testing.T) {
		r := a.kith("delegate", "--profile", "js-ask", "--peer", b.id, "--budget", "100", "ask")
		if r.code != 2 || !strings.Contains(r.stderr, "question (turn 1): which color?") {
			t.Fatalf("delegate to an asking agent: want exit 2 and the question; %v", r)
		}
		id := delegationID(t, r)
		if d := showJSON(t, a, id); d.State.String() != "input_required" || d.Question != "which color?" || d.Turn != 1 {
			t.Fatalf("A's delegation while it waits: %+v", d)
		}
		if d := showJSON(t, b, id); d.State.String() != "input_required" || d.Role != api.RoleProvider {
			t.Fatalf("B's delegation while it waits: %+v", d)
		}
		a.kith("tasks", "reply", id, "blue").mustSucceed(t)
		if d := waitFor(id, "completed"); d.Output != "COLOR: BLUE" {
			t.Fatalf("output after the answer: %q", d.Output)
		}
		turns(id)
		// A reply to a delegation that waits for nothing is refused.
		if r := a.kith("tasks", "reply", id, "red"); r.code == 0 || !strings.Contains(r.stderr, "not waiting for input") {
			t.Fatalf("reply to a completed delegation: %v", r)
		}
	})

	t.Run("gateway", func(t *testing.T) {
		token := a.enableGateway(t)
		base := a.httpBase()
		waitSkill(t, base, "js-ask")
		for _, mode := range []string{"v1.0", "legacy"} {
			t.Run(mode, func(t *testing.T) {
				args := []string{"multiturn", base, token, "js-ask"}
				if mode == "legacy" {
					args = append(args, "legacy")
				}
				out := runInterop(t, nodeBin, args...)
				id, _ := out["multiTurnTaskId"].(string)
				d := waitFor(id, "completed")
				if d.Peer != b.id || d.Output != "COLOR: BLUE" {
					t.Fatalf("A's delegation %s: %+v, want B's COLOR: BLUE", id, d)
				}
				turns(id)
			})
		}
	})
}
