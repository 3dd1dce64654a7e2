package delegation

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

func TestDelegateCompletesWithVerifiedProof(t *testing.T) {
	nodes := newMesh(t, 2, nil)
	a, b := nodes[0], nodes[1]
	d := delegateAndWait(t, a, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("hello mesh"), BudgetTokens: 100})
	if d.State != protocol.StateCompleted {
		t.Fatalf("state %s (%s)", d.State, d.Reason)
	}
	if got := Output(d); got != "hello mesh" {
		t.Fatalf("output %q", got)
	}
	if !d.Remote || d.Peer != b.id.PeerID() {
		t.Fatalf("requester record: remote %v peer %s", d.Remote, d.Peer)
	}
	if _, err := a.engine().Verify(d.ID); err != nil {
		t.Fatalf("verify: %v", err)
	}
	// The provider keeps its own record, completed, with the same result.
	if pd := providerRecord(t, b, d.ID); pd.State != protocol.StateCompleted || !bytes.Equal(pd.Result, d.Result) {
		t.Fatalf("provider record %+v", pd.State)
	}
	saw := a.sawTypes()
	for _, typ := range []protocol.MessageType{protocol.TypeCapabilityQuery, protocol.TypeCapabilityResponse,
		protocol.TypeDelegationOffer, protocol.TypeDelegationAccept, protocol.TypeDelegationStatus, protocol.TypeDelegationResult} {
		if !saw[typ] {
			t.Errorf("requester never saw %s cross the wire", typ)
		}
	}
	// The event log tells the story in order.
	evs, _ := a.st.Events(store.RoleRequester, d.ID, 0)
	var states []string
	for _, ev := range evs {
		states = append(states, ev.State.String())
	}
	if got := strings.Join(states, ","); !strings.HasPrefix(got, "accepted,running") || !strings.HasSuffix(got, "completed") {
		t.Fatalf("requester event states %s", got)
	}
}

func TestLocalProfileRunsInProcess(t *testing.T) {
	nodes := newMesh(t, 1, nil)
	a := nodes[0]
	d := delegateAndWait(t, a, Request{Profile: "echo", Task: textTask("local")})
	if d.State != protocol.StateCompleted || d.Remote || Output(d) != "local" {
		t.Fatalf("state %s remote %v output %q reason %q", d.State, d.Remote, Output(d), d.Reason)
	}
	if _, err := a.engine().Verify(d.ID); err != nil {
		t.Fatalf("verify local proof: %v", err)
	}
	if len(a.sawTypes()) != 0 {
		t.Fatalf("local delegation crossed the wire: %v", a.sawTypes())
	}
}

func TestRejectReasons(t *testing.T) {
	block := newBlocking()
	t.Cleanup(block.Release)
	nodes := newMesh(t, 2, func(i int, c *Config) {
		c.MaxRemoteConcurrent = 1
		c.Profiles = append(c.Profiles,
			Profile{Profile: protocol.Profile{Name: "big", MaxBudgetTokens: 1000}, MinBudgetTokens: 100, Executor: executor.Echo{}},
			Profile{Profile: protocol.Profile{Name: "slow", MaxBudgetTokens: 1000}, Executor: executor.HandlerFunc(block.handle)},
		)
	})
	a, b := nodes[0], nodes[1]
	bp := b.id.PeerID()
	cases := []struct {
		name   string
		req    Request
		reason protocol.RejectReason
	}{
		{"no matching profile", Request{Profile: "nope", Peer: bp, BudgetTokens: 10}, protocol.ReasonNoMatchingProfile},
		{"budget too high", Request{Profile: "echo", Peer: bp, BudgetTokens: 1001}, protocol.ReasonBudgetTooHigh},
		{"budget too low", Request{Profile: "big", Peer: bp, BudgetTokens: 10}, protocol.ReasonBudgetTooLow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.req.Task = textTask("x")
			d := delegateAndWait(t, a, c.req)
			if d.State != protocol.StateRejected || !strings.HasPrefix(d.Reason, c.reason.String()) {
				t.Fatalf("state %s reason %q, want rejected %s", d.State, d.Reason, c.reason)
			}
		})
	}
	t.Run("busy", func(t *testing.T) {
		ctx := context.Background()
		first, err := a.engine().Delegate(ctx, Request{Profile: "slow", Peer: bp, Task: textTask("1"), BudgetTokens: 10})
		if err != nil {
			t.Fatal(err)
		}
		waitStarted(t, block)
		d := delegateAndWait(t, a, Request{Profile: "echo", Peer: bp, Task: textTask("2"), BudgetTokens: 10})
		if d.State != protocol.StateRejected || !strings.HasPrefix(d.Reason, "busy") {
			t.Fatalf("state %s reason %q, want rejected busy", d.State, d.Reason)
		}
		block.Release()
		if d, _ := a.engine().Wait(ctx, first); d.State != protocol.StateCompleted {
			t.Fatalf("first delegation %s (%s)", d.State, d.Reason)
		}
	})
	t.Run("expired", func(t *testing.T) {
		// The requester's clock says the offer left long ago: its deadline
		// has passed by the time the provider sees it.
		late := newMesh(t, 2, func(i int, c *Config) {
			if i == 0 {
				c.Now = func() time.Time { return time.Now().Add(-time.Minute) }
			}
		})
		d := delegateAndWait(t, late[0], Request{Profile: "echo", Peer: late[1].id.PeerID(), Task: textTask("x"), BudgetTokens: 10, Timeout: time.Second})
		if d.State != protocol.StateRejected || !strings.HasPrefix(d.Reason, "expired") {
			t.Fatalf("state %s reason %q, want rejected expired", d.State, d.Reason)
		}
	})
}

func TestLoopDetected(t *testing.T) {
	// B's "relay" profile delegates its task back to the peer that asked:
	// a loop, which that peer must refuse.
	var nodes []*testNode
	nodes = newMesh(t, 2, func(i int, c *Config) {
		if i != 1 {
			return
		}
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "relay", MaxBudgetTokens: 100},
			Executor: executor.HandlerFunc(func(ctx context.Context, task executor.Task, emit func(executor.Update)) (executor.Result, error) {
				e := nodes[1].engine()
				id, err := e.DelegateChild(ctx, Request{Profile: "echo", Peer: nodes[0].id.PeerID(), Task: textTask(task.Text)})
				if err != nil {
					return executor.Result{}, err
				}
				d, err := e.Wait(ctx, id)
				if err != nil {
					return executor.Result{}, err
				}
				return executor.Result{}, executor.Tell("child %s: %s", d.State, d.Reason)
			})})
	})
	a, b := nodes[0], nodes[1]
	d := delegateAndWait(t, a, Request{Profile: "relay", Peer: b.id.PeerID(), Task: textTask("loop"), BudgetTokens: 50})
	if d.State != protocol.StateFailed || !strings.Contains(d.Reason, "loop_detected") {
		t.Fatalf("parent state %s reason %q, want failed with the child's loop_detected", d.State, d.Reason)
	}
	// On B, the child hangs under the provider-side parent, and was
	// rejected by A as a loop.
	children, err := b.st.Children(d.ID)
	if err != nil || len(children) != 1 {
		t.Fatalf("children of %s on B: %v, %v", d.ID, children, err)
	}
	ch := children[0]
	if ch.State != protocol.StateRejected || !strings.HasPrefix(ch.Reason, "loop_detected") || !ch.Remote || ch.Peer != a.id.PeerID() {
		t.Fatalf("child %+v", ch)
	}
	if ch.BudgetTokens > 50 {
		t.Fatalf("child budget %d exceeds parent's 50", ch.BudgetTokens)
	}
}

func TestCancel(t *testing.T) {
	a, b, block := slowPair(t)
	ctx := context.Background()
	id, err := a.engine().Delegate(ctx, Request{Profile: "slow", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, block)
	if err := a.engine().Cancel(id, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	d, _ := a.engine().Get(id)
	if d.State != protocol.StateCancelled {
		t.Fatalf("requester state %s", d.State)
	}
	labtest.WaitFor(t, 15*time.Second, "provider cancelled", func() bool {
		pd, err := b.st.GetDelegation(store.RoleProvider, id)
		return err == nil && pd.State == protocol.StateCancelled && pd.Reason == "changed my mind"
	})
}

func TestTimeoutExpires(t *testing.T) {
	a, b, _ := slowPair(t)
	d := delegateAndWait(t, a, Request{Profile: "slow", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 10, Timeout: 300 * time.Millisecond})
	if d.State != protocol.StateExpired {
		t.Fatalf("state %s (%s), want expired", d.State, d.Reason)
	}
	if _, err := a.engine().Verify(d.ID); err != nil {
		t.Fatalf("the provider's expired result should carry a valid proof: %v", err)
	}
}

func TestBudgetViolationRecorded(t *testing.T) {
	nodes := newMesh(t, 2, func(i int, c *Config) {
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "greedy", MaxBudgetTokens: 1000},
			Executor: executor.HandlerFunc(func(context.Context, executor.Task, func(executor.Update)) (executor.Result, error) {
				return executor.Result{Text: "lots", Usage: executor.Usage{Prompt: 5, Completion: 500, Total: 505}}, nil
			})})
	})
	a, b := nodes[0], nodes[1]
	d := delegateAndWait(t, a, Request{Profile: "greedy", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 100})
	if d.State != protocol.StateFailed || !strings.HasPrefix(d.Reason, ReasonBudgetViolation) {
		t.Fatalf("state %s reason %q, want failed budget_violation", d.State, d.Reason)
	}
	if d.Usage.Completion != 500 {
		t.Fatalf("recorded usage %+v, want the reported 500", d.Usage)
	}
}

func TestTamperedProofRejected(t *testing.T) {
	nodes := newMesh(t, 2, nil)
	a, b := nodes[0], nodes[1]
	b.engine().SetMutateResult(func(r *protocol.DelegationResult) {
		r.Output = []protocol.Part{protocol.TextPart("forged output")}
		r.Usage.Completion = 1 // the proof still says otherwise
	})
	d := delegateAndWait(t, a, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("real output"), BudgetTokens: 100})
	if d.State != protocol.StateFailed || !strings.HasPrefix(d.Reason, ReasonProofInvalid) {
		t.Fatalf("state %s reason %q, want failed proof_invalid", d.State, d.Reason)
	}
	if _, err := a.engine().Verify(d.ID); !errors.Is(err, ErrProofInvalid) {
		t.Fatalf("verify: %v, want ErrProofInvalid", err)
	}
}

// A result whose output is not the output the provider signed fails, and
// so does a proof from a 1.3 provider that binds no output; an older
// provider's proof (no output digest) still passes.
func TestTamperedOutputRejected(t *testing.T) {
	nodes := newMesh(t, 2, nil)
	a, b := nodes[0], nodes[1]
	b.engine().SetMutateResult(func(r *protocol.DelegationResult) {
		r.Output = []protocol.Part{protocol.TextPart("forged output")} // usage and all else untouched
	})
	d := delegateAndWait(t, a, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("real output"), BudgetTokens: 100})
	if d.State != protocol.StateFailed || !strings.HasPrefix(d.Reason, ReasonProofInvalid) || !strings.Contains(d.Reason, "output") {
		t.Fatalf("state %s reason %q, want failed proof_invalid (output)", d.State, d.Reason)
	}
}

func TestMatchOutput(t *testing.T) {
	out := []protocol.Part{protocol.TextPart("the answer")}
	m := &protocol.DelegationResult{Output: out}
	offer := func(multiTurn bool) []byte {
		b, err := protocol.EncodeMessage(&protocol.DelegationOffer{ID: protocol.NewDelegationID(), Profile: "echo",
			Task: textTask("x"), BudgetTokens: 10, Timeout: time.Minute, HopLimit: 1, MultiTurn: multiTurn})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	signed := protocol.ResultProof{OutputHash: protocol.OutputDigest(protocol.DigestSHA256, out)}
	cases := []struct {
		name  string
		p     protocol.ResultProof
		d     store.Delegation
		moved bool
		ok    bool
	}{
		{"digest matches", signed, store.Delegation{Remote: true, Offer: offer(true)}, false, true},
		{"digest of other output", protocol.ResultProof{OutputHash: protocol.OutputDigest(protocol.DigestSHA256, []protocol.Part{protocol.TextPart("the answer ")})},
			store.Delegation{Remote: true, Offer: offer(false)}, false, false},
		{"no digest from a 1.2 provider", protocol.ResultProof{}, store.Delegation{Remote: true, Offer: offer(false)}, false, true},
		{"no digest from a 1.3 provider", protocol.ResultProof{}, store.Delegation{Remote: true, Offer: offer(true)}, false, false},
		{"no digest after a re-offer", protocol.ResultProof{}, store.Delegation{Remote: true, Offer: offer(true)}, true, true},
		{"no digest on a local delegation stored before 1.3", protocol.ResultProof{}, store.Delegation{Offer: offer(false)}, false, true},
		{"digest of other output on a local delegation", protocol.ResultProof{OutputHash: protocol.OutputDigest(protocol.DigestSHA256, nil)}, store.Delegation{Offer: offer(false)}, false, false},
	}
	for _, c := range cases {
		err := matchOutput(c.p, c.d, outputSum(c.p, m), c.moved)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrProofInvalid)) {
			t.Errorf("%s: %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestReattachAfterDroppedStream(t *testing.T) {
	a, b, block := slowPair(t)
	ctx := context.Background()
	id, err := a.engine().Delegate(ctx, Request{Profile: "slow", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 10, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, block)
	labtest.WaitFor(t, 15*time.Second, "requester running", func() bool { d, _ := a.engine().Get(id); return d.State == protocol.StateRunning })
	// Drop every connection between the two: the stream dies mid-run.
	for _, c := range a.host.Network().ConnsToPeer(b.id.PeerID()) {
		_ = c.Close()
	}
	block.Release()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateCompleted || Output(d) != "done: x" {
		t.Fatalf("after reattach: state %s reason %q output %q err %v", d.State, d.Reason, Output(d), err)
	}
	if _, err := a.engine().Verify(id); err != nil {
		t.Fatalf("transcript after reattach: %v", err)
	}
}

func TestProviderRestartFailsInFlight(t *testing.T) {
	a, b, block := slowPair(t)
	ctx := context.Background()
	id, err := a.engine().Delegate(ctx, Request{Profile: "slow", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 10, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, block)
	// Once the provider has stored (and so acknowledged) the task: before
	// that, a crash loses only an unacknowledged offer, which the requester
	// offers again (TestProviderCrashBeforeAcceptRunsAgain).
	labtest.WaitFor(t, 15*time.Second, "provider stored the task", func() bool {
		_, err := b.st.DelegationInfo(store.RoleProvider, id)
		return err == nil
	})
	b.crash()
	b.start()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateFailed || d.Reason != ReasonProviderRestarted {
		t.Fatalf("state %s reason %q err %v, want failed provider_restarted", d.State, d.Reason, err)
	}
	if _, err := a.engine().Verify(id); err != nil {
		t.Fatalf("restart result proof: %v", err)
	}
}

// TestProviderCrashBeforeAcceptRunsAgain: a provider that crashes while a
// task runs but before it stored (and acknowledged) it has promised
// nothing; the requester offers the task again and the restarted provider
// runs it from the start.
func TestProviderCrashBeforeAcceptRunsAgain(t *testing.T) {
	a, b, block := slowPair(t)
	b.engine().SetOpenDelay(time.Hour) // the task stays unstored until it ends
	ctx := context.Background()
	id, err := a.engine().Delegate(ctx, Request{Profile: "slow", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 10, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, block)
	b.crash()
	b.start()
	waitStarted(t, block) // offered again, and running again
	block.Release()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateCompleted || Output(d) != "done: x" {
		t.Fatalf("state %s reason %q output %q err %v, want completed", d.State, d.Reason, Output(d), err)
	}
	if _, err := a.engine().Verify(id); err != nil {
		t.Fatalf("result proof: %v", err)
	}
}

// A requester that comes back while its task still runs unstored on the
// provider (see openDelay) asks again for the same delegation: the
// provider stores the running task then and answers for it, instead of
// taking the offer as new and running it a second time.
func TestRequesterBackWhileTaskUnstoredRunsItOnce(t *testing.T) {
	a, b, block := slowPair(t)
	b.engine().SetOpenDelay(time.Hour) // the task stays unstored until it ends or is asked for
	id, err := a.engine().Delegate(context.Background(), Request{Profile: "slow", Peer: b.id.PeerID(), Task: textTask("z"), BudgetTokens: 10, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, block)
	a.crash()
	a.start()
	labtest.WaitFor(t, 15*time.Second, "the provider stores the task when the requester asks again", func() bool {
		_, err := b.st.GetDelegation(store.RoleProvider, id)
		return err == nil
	})
	block.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateCompleted || Output(d) != "done: z" {
		t.Fatalf("state %s reason %q output %q err %v, want completed", d.State, d.Reason, Output(d), err)
	}
	if n := len(block.started); n != 0 {
		t.Fatalf("the task ran %d more times", n)
	}
	if _, err := a.engine().Verify(id); err != nil {
		t.Fatal(err)
	}
}

func TestRequesterRestartCollectsResult(t *testing.T) {
	a, b, block := slowPair(t)
	id, err := a.engine().Delegate(context.Background(), Request{Profile: "slow", Peer: b.id.PeerID(), Task: textTask("y"), BudgetTokens: 10, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, block)
	a.stop()
	block.Release()
	labtest.WaitFor(t, 15*time.Second, "provider finished while requester down", func() bool {
		pd, err := b.st.GetDelegation(store.RoleProvider, id)
		return err == nil && pd.State == protocol.StateCompleted
	})
	a.start()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateCompleted || Output(d) != "done: y" {
		t.Fatalf("after requester restart: state %s reason %q output %q err %v", d.State, d.Reason, Output(d), err)
	}
	if _, err := a.engine().Verify(id); err != nil {
		t.Fatal(err)
	}
}

// An engine refuses work until Run has taken its context, and Started
// says when that is: a caller that starts Run on a goroutine and waits for
// Started never meets ErrNotRunning.
func TestStartedBeforeWork(t *testing.T) {
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := New(Config{Identity: id, Store: st, Dialer: noStreams{},
		Profiles: []Profile{{Profile: protocol.Profile{Name: "echo", MaxBudgetTokens: 100}, Executor: executor.Echo{}}}})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Profile: "echo", Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("hi")}}}
	select {
	case <-eng.Started():
		t.Fatal("Started is closed before Run")
	default:
	}
	if _, err := eng.Delegate(context.Background(), req); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Delegate before Run: %v, want ErrNotRunning", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-eng.Started()
	did, err := eng.Delegate(context.Background(), req)
	if err != nil {
		t.Fatalf("Delegate once Started: %v", err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if d, err := eng.Wait(wctx, did); err != nil || d.State != protocol.StateCompleted {
		t.Fatalf("local echo: %s (reason %q), %v", d.State, d.Reason, err)
	}
}

// noStreams is a Dialer for an engine that only runs local work.
type noStreams struct{}

func (noStreams) OpenStream(context.Context, peer.ID) (Stream, error) {
	return nil, errors.New("no network in this test")
}
