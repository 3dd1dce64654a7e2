package delegation

// Tests of the hot path's shortcuts: each checks that a cost cut (a read
// skipped, a hash moved aside, output sent once) keeps what it stood for.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// TestWaitAfterMissedEvents: Wait reads the record only when an event says
// the state is terminal, unless its channel overflowed and it may have
// missed that event: then it reads on the next one. Here the terminal
// transition's own event is lost to a full channel; a Wait that trusted
// the events alone would never return.
func TestWaitAfterMissedEvents(t *testing.T) {
	nd := newMesh(t, 1, nil)[0]
	e := nd.eng
	id := protocol.NewDelegationID()
	if err := e.create(store.Delegation{ID: id, Role: store.RoleRequester, Peer: nd.host.ID(), State: protocol.StateOffered}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := waitAsync(ctx, t, e, id, 1)
	k := subKey{store.RoleRequester, id}
	// Publish faster than Wait drains its channel (waitBuffer) until an
	// event has been dropped.
	missed := func() bool {
		e.subsMu.Lock()
		defer e.subsMu.Unlock()
		for _, m := range e.subs[k] {
			return m.missed.Load()
		}
		return false
	}
	for i := 0; !missed(); i++ {
		if ctx.Err() != nil {
			t.Fatal("no event was ever dropped: Wait drained its channel faster than events were published")
		}
		for range 256 {
			e.publish(store.RoleRequester, id, store.Event{Seq: uint64(i + 2), Type: EventStatus, State: protocol.StateRunning})
		}
	}
	// The terminal state is written and its event never published.
	if _, err := e.st.TransitionAfter(store.RoleRequester, id, nil, protocol.StateCompleted, store.Event{}, nil); err != nil {
		t.Fatal(err)
	}
	e.publish(store.RoleRequester, id, store.Event{Type: EventStatus, State: protocol.StateRunning})
	w := <-got
	if w.err != nil {
		t.Fatalf("Wait: %v (it missed the terminal event and never read the record again)", w.err)
	}
	if w.d.State != protocol.StateCompleted {
		t.Fatalf("Wait returned state %s, want completed", w.d.State)
	}
}

// TestWaitHandsOverResult: the transition that ends a delegation with its
// result hands that delegation to Wait, which returns it without reading
// the store, and it is exactly what the store holds (offer left out). A
// transition that ends it without touching the result (a cancel after a
// result was stored) hands nothing over: Wait then reads the stored result,
// where a handed-over record would have none.
func TestWaitHandsOverResult(t *testing.T) {
	nd := newMesh(t, 1, nil)[0]
	e := nd.eng
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name     string
		stored   []byte // a result stored before the terminal transition
		final    []byte // the result the terminal transition sets
		handover bool
	}{
		{name: "result set by the transition", final: []byte("final result"), handover: true},
		{name: "result stored before a cancel", stored: []byte("earlier result")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := protocol.NewDelegationID()
			if err := e.create(store.Delegation{ID: id, Role: store.RoleRequester, Peer: nd.host.ID(),
				State: protocol.StateOffered, Offer: []byte("the offer")}); err != nil {
				t.Fatal(err)
			}
			if tc.stored != nil {
				if _, err := e.st.UpdateDelegation(store.RoleRequester, id, func(d *store.Delegation) error {
					d.Result = tc.stored
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			ch, sub, unsubscribe := e.subscribe(store.RoleRequester, id, subscribeBuffer)
			defer unsubscribe()
			got := waitAsync(ctx, t, e, id, 2)
			to := protocol.StateCompleted
			var mutate func(*store.Delegation)
			if tc.final != nil {
				mutate = func(d *store.Delegation) { d.Result = tc.final }
			} else {
				to = protocol.StateCancelled
			}
			if _, err := e.transition(store.RoleRequester, id, to, store.Event{}, mutate); err != nil {
				t.Fatal(err)
			}
			<-ch
			if f := sub.final.Load(); (f != nil) != tc.handover {
				t.Fatalf("handed over: %v, want %v", f != nil, tc.handover)
			}
			w := <-got
			if w.err != nil {
				t.Fatal(w.err)
			}
			want, err := e.st.DelegationResult(store.RoleRequester, id)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(w.d, want) {
				t.Fatalf("Wait returned\n%+v\nthe store holds\n%+v", w.d, want)
			}
			if w.d.State != to || w.d.Offer != nil || !bytes.Equal(w.d.Result, append(tc.stored, tc.final...)) {
				t.Fatalf("Wait returned state %s, offer %q, result %q", w.d.State, w.d.Offer, w.d.Result)
			}
		})
	}
}

// TestWaitTrustsItsFollower: Wait does not read a delegation that a
// follower drives and whose end has not been published: the event that
// ends it comes to Wait's subscription. Here it is not even in the store,
// so a Wait that read it would fail at once; it returns what the ending
// transition hands over. The mark goes with that event, and with the
// follower: a later Wait reads the store, and a delegation run end to end
// leaves no mark behind.
func TestWaitTrustsItsFollower(t *testing.T) {
	nodes := newMesh(t, 2, nil)
	a, b := nodes[0], nodes[1]
	e := a.eng
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	marked := func(id protocol.DelegationID) bool {
		e.subsMu.Lock()
		defer e.subsMu.Unlock()
		_, ok := e.live[id]
		return ok
	}

	id := protocol.NewDelegationID()
	e.setLive(id, true)
	got := waitAsync(ctx, t, e, id, 1)
	final := &store.Delegation{ID: id, Role: store.RoleRequester, State: protocol.StateCompleted, Result: []byte("done")}
	e.publishFinal(store.RoleRequester, id, store.Event{Seq: 1, Type: store.EventState, State: protocol.StateCompleted}, final)
	if w := <-got; w.err != nil || w.d.State != protocol.StateCompleted || string(w.d.Result) != "done" {
		t.Fatalf("Wait returned %+v, %v; want the delegation its ending event handed over", w.d, w.err)
	}
	if marked(id) {
		t.Fatal("still marked as followed after its end was published")
	}
	if _, err := e.Wait(ctx, id); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a Wait after the end: %v, want ErrUnknown from reading the store", err)
	}

	for range 3 {
		id, err := e.Delegate(ctx, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("hello there")})
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.Wait(ctx, id)
		if err != nil || d.State != protocol.StateCompleted {
			t.Fatalf("Wait: %v, state %s", err, d.State)
		}
	}
	labtest.WaitFor(t, 10*time.Second, "the followers' marks cleared", func() bool {
		e.subsMu.Lock()
		defer e.subsMu.Unlock()
		return len(e.live) == 0
	})
}

// waited is what a Wait returned.
type waited struct {
	d   store.Delegation
	err error
}

// waitAsync runs Wait for id in the background and returns once it has
// subscribed, so that subscribers of id number subs.
func waitAsync(ctx context.Context, t *testing.T, e *Engine, id protocol.DelegationID, subs int) <-chan waited {
	t.Helper()
	got := make(chan waited, 1)
	go func() {
		d, err := e.Wait(ctx, id)
		got <- waited{d, err}
	}()
	k := subKey{store.RoleRequester, id}
	labtest.WaitFor(t, 10*time.Second, "Wait subscribed", func() bool {
		e.subsMu.Lock()
		defer e.subsMu.Unlock()
		return len(e.subs[k]) == subs
	})
	return got
}

// TestLargeFilesStaged: a large delegation's offer and result each go to
// their store's file once on each side, written beside other work (the
// provider's offer as the task runs, the requester's result as its proof is
// checked, store/stage.go) and none inside a commit; whether the provider's
// task ends before its record is written (one merged write) or after (a
// slow task: the record first, the result later).
func TestLargeFilesStaged(t *testing.T) {
	block := newBlocking()
	t.Cleanup(block.Release)
	nodes := newMesh(t, 2, func(i int, c *Config) {
		c.Profiles[0].MaxBudgetTokens = 1 << 20
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "slow", MaxBudgetTokens: 1 << 20},
			Executor: executor.HandlerFunc(block.handle)})
		c.Conn.IOTimeout = 30 * time.Second
	})
	a, b := nodes[0], nodes[1]
	text := wordsOf(1 << 20)
	for _, tc := range []struct{ profile, out string }{{"echo", text}, {"slow", "done: " + text}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		id, err := a.engine().Delegate(ctx, Request{Profile: tc.profile, Peer: b.id.PeerID(), Task: textTask(text), BudgetTokens: 1 << 20})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if tc.profile == "slow" {
			waitStarted(t, block)
			// The offer's file was staged before the task started; the
			// record comes openDelay later.
			if got := b.storeMetrics.ValueFiles()["staged"]; got != 3 {
				t.Errorf("provider: %d value files staged when the slow task started, want 3 (2 of the echo, its offer)", got)
			}
			labtest.WaitFor(t, 15*time.Second, "the provider stores the running task", func() bool {
				_, err := b.st.GetDelegation(store.RoleProvider, id)
				return err == nil
			})
			block.Release()
		}
		d, err := a.engine().Wait(ctx, id)
		cancel()
		if err != nil || d.State != protocol.StateCompleted || Output(d) != tc.out {
			t.Fatalf("%s: %s (%s) %v, %d bytes of output", tc.profile, d.State, d.Reason, err, len(Output(d)))
		}
	}
	a.stop() // a dropped file is counted when its removal is queued: stop waits for that
	b.stop()
	for _, n := range []*testNode{a, b} {
		if got, want := n.storeMetrics.ValueFiles(), map[string]uint64{"staged": 4}; !reflect.DeepEqual(got, want) {
			t.Errorf("value files written %v, want %v", got, want)
		}
	}
}

// TestLargeOfferHashChecked: an offer large enough to be hashed aside
// (digestAsideMin) is still checked against the proof. A provider that
// signs the hash of the offer it received completes; one that signs the
// hash of other bytes of the same size fails the proof.
func TestLargeOfferHashChecked(t *testing.T) {
	task := textTask(wordsOf(2 * digestAsideMin))
	for _, forge := range []bool{false, true} {
		nodes := newMesh(t, 2, nil)
		a, b := nodes[0], nodes[1]
		evilProvider(t, b, func(c *protocol.Conn, first protocol.Message, raw []byte) {
			o, ok := first.(*protocol.DelegationOffer)
			if !ok {
				return
			}
			accept, err := protocol.EncodeMessage(&protocol.DelegationAccept{ID: o.ID, ProviderHandle: "h"})
			if err != nil || c.SendEncoded(accept) != nil {
				return
			}
			signed := raw
			if forge {
				signed = bytes.Clone(raw)
				signed[len(signed)/2] ^= 1
			}
			out := []protocol.Part{protocol.TextPart("done")}
			usage := protocol.Usage{Prompt: 1, Completion: 1, Total: 2}
			proof, err := protocol.SignResultProof(b.id, protocol.ResultProof{
				DelegationID: o.ID, Requester: a.id.PeerID(), OfferHash: sha256.Sum256(signed),
				TranscriptHash: transcriptHash(protocol.DigestSHA256, []store.Event{{Type: EventAccepted, Data: accept}}),
				OutputHash:     protocol.OutputDigest(protocol.DigestSHA256, out), Usage: usage, CompletedAt: time.Now(), State: protocol.StateCompleted,
			})
			if err != nil {
				t.Error(err)
				return
			}
			_ = c.Send(&protocol.DelegationResult{ID: o.ID, State: protocol.StateCompleted, Output: out, Usage: usage, Proof: proof})
			if o.ProvisionalResult {
				_ = c.Send(&protocol.DelegationStatus{ID: o.ID, State: protocol.StateCompleted, Stored: true})
			}
			_, _ = c.Recv(2 * time.Second)
		})
		d := delegateAndWait(t, a, Request{Profile: "echo", Peer: b.id.PeerID(), Task: task, BudgetTokens: 1 << 20})
		if !forge && d.State != protocol.StateCompleted {
			t.Fatalf("proof over the offer sent: state %s reason %q, want completed", d.State, d.Reason)
		}
		if forge && (d.State != protocol.StateFailed || !strings.HasPrefix(d.Reason, ReasonProofInvalid) || !strings.Contains(d.Reason, "offer hash")) {
			t.Fatalf("proof over other bytes: state %s reason %q, want failed %s (offer hash)", d.State, d.Reason, ReasonProofInvalid)
		}
	}
}

// TestDigestSameBytesOnly: a digest answers for the very bytes it hashed
// with its own hash, and hashes anything else (equal bytes elsewhere in
// memory, the same bytes with the other hash) anew.
func TestDigestSameBytesOnly(t *testing.T) {
	algs := []protocol.ProofDigest{protocol.DigestSHA256, protocol.DigestBLAKE3}
	for _, alg := range algs {
		other := algs[1-alg]
		for _, n := range []int{10, 2 * digestAsideMin} {
			b := bytes.Repeat([]byte("k"), n)
			d := digestOf(alg, b)
			if d.sumOf(alg, b) != alg.Sum(b) || d.get() != alg.Sum(b) {
				t.Fatalf("%s, %d bytes: digest differs from %s", alg, n, alg)
			}
			if d.sumOf(other, b) != other.Sum(b) || other.Sum(b) == alg.Sum(b) {
				t.Fatalf("%s, %d bytes: sumOf(%s) did not hash anew", alg, n, other)
			}
			changed := bytes.Clone(b)
			changed[0] = 'x'
			if d.sumOf(alg, changed) != alg.Sum(changed) {
				t.Fatalf("%s, %d bytes: sumOf(other bytes) gave the digest of the first", alg, n)
			}
			if (*digest)(nil).sumOf(alg, b) != alg.Sum(b) {
				t.Fatalf("nil digest: not %s", alg)
			}
			// A digest not begun is computed by get; one begun twice, once.
			if got := digestLater(alg, b).get(); got != alg.Sum(b) {
				t.Fatalf("%s, %d bytes: a digest not begun gave %x", alg, n, got)
			}
			later := digestLater(alg, b)
			later.begin()
			later.begin()
			if later.sumOf(alg, b) != alg.Sum(b) {
				t.Fatalf("%s, %d bytes: a digest begun twice differs from %s", alg, n, alg)
			}
		}
	}
}

// TestDigestInBackground: a hash begun in the background (beginIdle) gives
// the one-shot digest, for either hash, whether it finished on its own or
// was hurried by begin or get, and it yields its processor between
// pieces: on one processor, a goroutine that yields gets it back before
// the hash of many pieces is done.
func TestDigestInBackground(t *testing.T) {
	for _, alg := range []protocol.ProofDigest{protocol.DigestSHA256, protocol.DigestBLAKE3} {
		for _, n := range []int{digestAsideMin, 3*idlePiece + 1, 16 * idlePiece} {
			b := bytes.Repeat([]byte("q"), n)
			want := alg.Sum(b)
			idle := digestLater(alg, b)
			idle.beginIdle()
			idle.beginIdle()
			if got := idle.get(); got != want {
				t.Fatalf("%s, %d bytes in the background: %x, want %x", alg, n, got, want)
			}
			hurried := digestLater(alg, b)
			hurried.beginIdle()
			hurried.begin()
			if got := hurried.sumOf(alg, b); got != want {
				t.Fatalf("%s, %d bytes hurried by begin: %x, want %x", alg, n, got, want)
			}
			urgent := digestLater(alg, b)
			urgent.begin()
			urgent.beginIdle() // started already: nothing more
			if got := urgent.get(); got != want {
				t.Fatalf("%s, %d bytes begun then beginIdle: %x, want %x", alg, n, got, want)
			}
		}
	}

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	b := bytes.Repeat([]byte("y"), 64*idlePiece) // 4 MiB: milliseconds of hashing
	d := digestLater(protocol.DigestSHA256, b)
	d.beginIdle()
	runtime.Gosched() // the hash runs a piece, then yields back
	select {
	case <-d.done:
		t.Fatal("the background hash of 64 pieces ran to its end before yielding")
	default:
	}
	if got := d.get(); got != sha256.Sum256(b) {
		t.Fatalf("4 MiB: %x, want SHA-256", got)
	}
}

// TestFastOutputOnlyInResult: a task that ends before its first flush
// sends its output once, in the result: the requester logs no status
// carrying it, and hashes and stores it once.
func TestFastOutputOnlyInResult(t *testing.T) {
	nodes := newMesh(t, 2, func(_ int, c *Config) {
		c.Profiles = []Profile{{Profile: protocol.Profile{Name: "echo", MaxBudgetTokens: 1 << 20}, Executor: executor.Echo{}}}
	})
	a, b := nodes[0], nodes[1]
	task := wordsOf(200 << 10)
	d := delegateAndWait(t, a, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask(task), BudgetTokens: 1 << 20})
	if d.State != protocol.StateCompleted || Output(d) != task {
		t.Fatalf("state %s, output of %d bytes; want completed with the task echoed (%d bytes)", d.State, len(Output(d)), len(task))
	}
	if n := eventBytes(t, a.st, d.ID); n > 4<<10 {
		t.Fatalf("the requester's log holds %d bytes: the output was also streamed as statuses", n)
	}
}

// TestOutputAtStatusCapOnlyInResult: a fast task whose output fills one
// status exactly still sends it once, in the result; one update more than
// a status holds sends the output before it as a status of at most the
// cap. (Flushing once pending output reached the cap streamed an echo of
// MaxPayload whole as a status, stored inline on both sides, and then
// again in its result.)
func TestOutputAtStatusCapOnlyInResult(t *testing.T) {
	const statusCap = 4 * executor.EchoChunk // four of Echo's updates
	nodes := newMesh(t, 2, func(_ int, c *Config) {
		c.Profiles = []Profile{{Profile: protocol.Profile{Name: "echo", MaxBudgetTokens: 1 << 20}, Executor: executor.Echo{}}}
	})
	a, b := nodes[0], nodes[1]
	b.engine().SetStatusCap(statusCap)

	task := wordsOf(statusCap)
	d := delegateAndWait(t, a, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask(task), BudgetTokens: 1 << 20})
	if d.State != protocol.StateCompleted || Output(d) != task {
		t.Fatalf("state %s, output of %d bytes; want completed with the task echoed (%d bytes)", d.State, len(Output(d)), len(task))
	}
	if n := eventBytes(t, a.st, d.ID); n > 4<<10 {
		t.Fatalf("output of exactly one status's worth: the requester's log holds %d bytes, so it was also streamed as a status", n)
	}

	task = wordsOf(statusCap + executor.EchoChunk)
	d = delegateAndWait(t, a, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask(task), BudgetTokens: 1 << 20})
	if d.State != protocol.StateCompleted || Output(d) != task {
		t.Fatalf("state %s, output of %d bytes; want completed with the task echoed (%d bytes)", d.State, len(Output(d)), len(task))
	}
	streamed := 0
	for _, st := range statuses(t, a.st, d.ID) {
		n := protocol.PayloadSize(st.Partial)
		if n > statusCap {
			t.Fatalf("a status carried %d bytes of output, more than the cap of %d", n, statusCap)
		}
		streamed += n
	}
	if streamed == 0 {
		t.Fatalf("output of %d bytes from one fast task, cap %d: no status carried any; want what came before the update that passed the cap", len(task), statusCap)
	}
}

// TestPendingOutput: what goes in comes out whole and in order, small and
// large updates mixed, and take empties it.
func TestPendingOutput(t *testing.T) {
	var p pendingOutput
	var want strings.Builder
	for i, n := range []int{3, 700, 1, 1, 5000, 511, 512, 2} {
		s := strings.Repeat(string(rune('a'+i)), n)
		p.add(s)
		want.WriteString(s)
	}
	if p.n != want.Len() {
		t.Fatalf("n = %d, want %d", p.n, want.Len())
	}
	if got := p.take(); got != want.String() {
		t.Fatalf("take gave %d bytes, not the %d added in order", len(got), want.Len())
	}
	if p.n != 0 || p.take() != "" {
		t.Fatal("take did not empty it")
	}
	p.add("x")
	if p.take() != "x" {
		t.Fatal("reuse after take")
	}
}

// writeCounter counts the Writes a provider makes on its stream.
type writeCounter struct {
	network.Stream
	writes atomic.Int32
}

func (w *writeCounter) Write(b []byte) (int, error) {
	w.writes.Add(1)
	return w.Stream.Write(b)
}

// TestFastTaskOneWrite: a task that ends before its record is written (see
// openDelay) sends its accept, its running status and its result in one
// Write, and the requester still logs all three. Delegations after the
// first (which may also set up the session and ask for capabilities) each
// add exactly one Write on the provider's side, on a new stream or on a
// kept one; to a requester that asked for provisional results (1.5), the
// provider's store syncing, the confirmation follows in a second Write,
// once the record is durable.
func TestFastTaskOneWrite(t *testing.T) {
	for _, provisional := range []bool{false, true} {
		t.Run(fmt.Sprintf("provisional=%v", provisional), func(t *testing.T) {
			nodes := newMesh(t, 2, nil)
			a, b := nodes[0], nodes[1]
			if !provisional {
				b.engine().SetVersions(slices.DeleteFunc(slices.Clone(protocol.Supported), func(v protocol.Version) bool {
					return !v.Less(protocol.ProvisionalResults)
				}))
			}
			b.eng.SetOpenDelay(time.Minute) // the task surely ends first
			var ps providerStreams[*writeCounter]
			ps.handle(b, func(s network.Stream) *writeCounter { return &writeCounter{Stream: s} })
			writes := func() (n int32) {
				ps.each(func(w *writeCounter) { n += w.writes.Load() })
				return n
			}
			want := int32(1)
			if provisional {
				want = 2
			}
			for i := range 3 {
				before := writes()
				d := delegateAndWait(t, a, Request{Profile: "echo", Peer: b.id.PeerID(), Task: textTask("one write"), BudgetTokens: 100})
				if d.State != protocol.StateCompleted || Output(d) != "one write" {
					t.Fatalf("delegation %d: state %s, output %q", i, d.State, Output(d))
				}
				if provisional {
					// The confirmation comes after the result is reported:
					// the stream is kept once it has.
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					waitKept(t, ctx, a, b, 1, fmt.Sprintf("delegation %d", i))
					cancel()
				}
				evs, err := a.st.Events(store.RoleRequester, d.ID, 0)
				if err != nil {
					t.Fatal(err)
				}
				var types []string
				for _, ev := range evs {
					types = append(types, ev.Type)
				}
				if !slices.Contains(types, EventAccepted) || !slices.Contains(types, EventStatus) || !slices.Contains(types, EventResult) {
					t.Fatalf("delegation %d: the requester logged %v; want the accept, the status and the result", i, types)
				}
				if n := writes() - before; i > 0 && n != want {
					t.Fatalf("delegation %d: the provider wrote %d times; want %d (accept, status and result in one Write)", i, n, want)
				}
			}
		})
	}
}

// TestPartsText: one text part is read back as the very string the result
// decoded (no copy of a large output), several are joined in order, and
// data parts add nothing.
func TestPartsText(t *testing.T) {
	big := strings.Repeat("word ", 1<<16)
	one := []protocol.Part{protocol.DataPart([]byte("bytes")), protocol.TextPart(big), protocol.TextPart("")}
	got := partsText(one)
	if got != big || unsafe.StringData(got) != unsafe.StringData(big) {
		t.Fatalf("one text part: got %d bytes at %p, want the part itself at %p", len(got), unsafe.StringData(got), unsafe.StringData(big))
	}
	for _, c := range []struct {
		parts []protocol.Part
		want  string
	}{
		{nil, ""},
		{[]protocol.Part{protocol.DataPart([]byte("x"))}, ""},
		{[]protocol.Part{protocol.TextPart("a"), protocol.DataPart([]byte("x")), protocol.TextPart("bc"), protocol.TextPart("d")}, "abcd"},
	} {
		if got := partsText(c.parts); got != c.want {
			t.Errorf("partsText(%d parts) = %q, want %q", len(c.parts), got, c.want)
		}
	}
}

// TestHeldOutputStreams: output that an executor emits and then says
// nothing more for a while reaches the requester while the task runs, not
// only with its result. Statuses are coalesced (flushInterval), but a
// coalesced update must not wait for the executor's next one: a handler
// that prints a line and then works for minutes had its line held all
// that time.
func TestHeldOutputStreams(t *testing.T) {
	a, b, block := slowPair(t)
	ctx := context.Background()
	id, err := a.engine().Delegate(ctx, Request{Profile: "slow", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	waitStarted(t, block)
	// The handler emitted "working " and now waits for Release: that
	// update must come on its own.
	labtest.WaitFor(t, 10*time.Second, "the requester to hear the output emitted before the handler blocked", func() bool {
		for _, st := range statuses(t, a.st, id) {
			if partsText(st.Partial) == "working " {
				return true
			}
		}
		return false
	})
	block.Release()
	d, err := a.engine().Wait(ctx, id)
	if err != nil || d.State != protocol.StateCompleted || Output(d) != "done: x" {
		t.Fatalf("state %s output %q err %v; want completed with the handler's result", d.State, Output(d), err)
	}
}

// TestProgressStreams: the progress an executor reports reaches the
// requester in a status, with no output beside it, while the task runs.
func TestProgressStreams(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	handler := func(ctx context.Context, task executor.Task, emit func(executor.Update)) (executor.Result, error) {
		emit(executor.Update{Progress: 0.25})
		emit(executor.Update{Progress: -1}) // cannot tell: the last known stands
		select {
		case <-release:
			return executor.Result{Text: "done"}, nil
		case <-ctx.Done():
			return executor.Result{}, context.Cause(ctx)
		}
	}
	nodes := newMesh(t, 2, func(_ int, c *Config) {
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "slow", MaxBudgetTokens: 1000}, Executor: executor.HandlerFunc(handler)})
	})
	a, b := nodes[0], nodes[1]
	id, err := a.engine().Delegate(context.Background(), Request{Profile: "slow", Peer: b.id.PeerID(), Task: textTask("x"), BudgetTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	labtest.WaitFor(t, 10*time.Second, "a status with the handler's progress", func() bool {
		for _, st := range statuses(t, a.st, id) {
			if st.ProgressPermille != 0 {
				if st.ProgressPermille != 250 || len(st.Partial) != 0 {
					t.Fatalf("status with progress %d‰ and %d parts; want 250‰ and none", st.ProgressPermille, len(st.Partial))
				}
				return true
			}
		}
		return false
	})
}

// statuses are the delegation_status messages in a requester's log of id.
func statuses(t *testing.T, st *store.Store, id protocol.DelegationID) []*protocol.DelegationStatus {
	t.Helper()
	evs, err := st.Events(store.RoleRequester, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []*protocol.DelegationStatus
	for _, ev := range evs {
		if ev.Type != EventStatus {
			continue
		}
		m, err := protocol.DecodeMessage(ev.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m.(*protocol.DelegationStatus))
	}
	return out
}

// TestExecOutputCapIsPayload: the exec executor's default cap on a
// command's output is what a delegation's result carries (the executor
// package imports no other kith package, so it keeps its own copy).
func TestExecOutputCapIsPayload(t *testing.T) {
	if executor.DefaultMaxOutput != protocol.MaxPayload {
		t.Fatalf("executor.DefaultMaxOutput = %d, protocol.MaxPayload = %d", executor.DefaultMaxOutput, protocol.MaxPayload)
	}
}
