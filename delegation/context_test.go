package delegation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// chatLog records what the "chat" executors of a mesh were given.
type chatLog struct {
	mu   sync.Mutex
	runs []chatRun
}

type chatRun struct {
	node    int
	text    string
	history []executor.Turn
}

func (l *chatLog) handler(node int) executor.HandlerFunc {
	return func(_ context.Context, task executor.Task, _ func(executor.Update)) (executor.Result, error) {
		l.mu.Lock()
		l.runs = append(l.runs, chatRun{node: node, text: task.Text, history: task.History})
		l.mu.Unlock()
		return executor.Result{Text: "re: " + task.Text}, nil
	}
}

func (l *chatLog) last(t *testing.T) chatRun {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.runs) == 0 {
		t.Fatal("no chat executor ran")
	}
	return l.runs[len(l.runs)-1]
}

// historyText shows turns as "task>result|task>result".
func historyText(turns []executor.Turn) string {
	var s []string
	for _, t := range turns {
		s = append(s, t.Task+">"+t.Result)
	}
	return strings.Join(s, "|")
}

// carriesHistory reports whether a stored offer carried a history part.
func carriesHistory(t *testing.T, d store.Delegation) bool {
	t.Helper()
	m, err := protocol.DecodeMessage(d.Offer)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range m.(*protocol.DelegationOffer).Task.Parts {
		if p.Kind == protocol.PartFile && p.File.MediaType == HistoryMediaType {
			return true
		}
	}
	return false
}

// contextMesh: node 0 and node 3 request, nodes 1 and 2 provide "chat".
func contextMesh(t *testing.T) ([]*testNode, *chatLog) {
	log := &chatLog{}
	var ids []peer.ID
	nodes := newMesh(t, 4, func(i int, c *Config) {
		switch i {
		case 0, 3:
			c.Finder = finderFunc(func() []peer.ID { return ids })
		default:
			c.Profiles = append(c.Profiles, Profile{
				Profile: protocol.Profile{Name: "chat", MaxBudgetTokens: 1 << 20}, Executor: log.handler(i),
			})
		}
	})
	ids = []peer.ID{nodes[1].host.ID(), nodes[2].host.ID()}
	return nodes, log
}

func chatReq(ctxID protocol.ContextID, text string) Request {
	return Request{Profile: "chat", ContextID: ctxID, Task: textTask(text)}
}

func TestContextAffinityAndHistory(t *testing.T) {
	nodes, log := contextMesh(t)
	req := nodes[0]
	index := map[peer.ID]int{nodes[1].host.ID(): 1, nodes[2].host.ID(): 2}

	// Three turns in one context land on one provider, which hands each
	// turn the ones before it from its own state: nothing is carried. The
	// first is sent to node 2, which the ranking alone would never pick
	// over node 1 (equal in all but the finder's order): only affinity
	// keeps the next two there.
	var first int
	for i, text := range []string{"t1", "t2", "t3"} {
		r := chatReq("conv", text)
		if i == 0 {
			r.Peer = nodes[2].host.ID()
		}
		d := delegateAndWait(t, req, r)
		if d.State != protocol.StateCompleted {
			t.Fatalf("%s: %s (%s)", text, d.State, d.Reason)
		}
		if i == 0 {
			first = index[d.Peer]
		} else if index[d.Peer] != first {
			t.Fatalf("%s ran on node %d, the context's state is on node %d", text, index[d.Peer], first)
		}
		if carriesHistory(t, d) {
			t.Fatalf("%s carried history to the provider that holds the context", text)
		}
	}
	if got, want := historyText(log.last(t).history), "t1>re: t1|t2>re: t2"; got != want {
		t.Fatalf("third turn's history %q, want %q", got, want)
	}

	// The provider goes away: the next turn moves, and carries the history.
	other := 3 - first
	nodes[first].stop()
	d := delegateAndWait(t, req, chatReq("conv", "t4"))
	if d.State != protocol.StateCompleted || index[d.Peer] != other {
		t.Fatalf("t4: %s on node %d (%s), want completed on node %d", d.State, index[d.Peer], d.Reason, other)
	}
	if !carriesHistory(t, d) {
		t.Fatal("t4 moved without the context's history")
	}
	run := log.last(t)
	if got, want := historyText(run.history), "t1>re: t1|t2>re: t2|t3>re: t3"; run.node != other || got != want {
		t.Fatalf("node %d's executor saw history %q, want %q on node %d", run.node, got, want, other)
	}
	if run.text != "t4" {
		t.Fatalf("executor's task text %q: the history part leaked into it", run.text)
	}

	// The new provider now holds the state: it stays there, without
	// carrying, across its own restart (the state is in its store).
	nodes[other].stop()
	nodes[other].start()
	d = delegateAndWait(t, req, chatReq("conv", "t5"))
	if d.State != protocol.StateCompleted || index[d.Peer] != other || carriesHistory(t, d) {
		t.Fatalf("t5: %s on node %d, carried %v; want completed on node %d, nothing carried",
			d.State, index[d.Peer], carriesHistory(t, d), other)
	}
	if got, want := historyText(log.last(t).history), "t1>re: t1|t2>re: t2|t3>re: t3|t4>re: t4"; got != want {
		t.Fatalf("after the provider's restart, history %q, want %q", got, want)
	}

	// Another requester naming the same context id sees none of it.
	d = delegateAndWait(t, nodes[3], Request{Profile: "chat", Peer: nodes[other].host.ID(), ContextID: "conv", Task: textTask("guess")})
	if d.State != protocol.StateCompleted {
		t.Fatalf("other requester: %s (%s)", d.State, d.Reason)
	}
	if run := log.last(t); run.text != "guess" || len(run.history) != 0 {
		t.Fatalf("another requester's task %q saw history %q", run.text, historyText(run.history))
	}

	// The history a requester builds keeps the newest turns under its
	// bound, oldest first.
	one := turnSize(historyTurn{Delegation: protocol.NewDelegationID().String(),
		Turn: executor.Turn{Profile: "chat", Task: "t5", Result: "re: t5"}})
	turns := req.engine().contextHistory("conv", 2*one, protocol.DelegationID{})
	var got []string
	for _, h := range turns {
		got = append(got, h.Task)
	}
	if fmt.Sprint(got) != "[t4 t5]" {
		t.Fatalf("history under a two-turn bound: %v, want [t4 t5]", got)
	}
}

// A named peer wins over affinity, and gets the history it lacks.
func TestContextNamedPeerGetsHistory(t *testing.T) {
	nodes, log := contextMesh(t)
	d := delegateAndWait(t, nodes[0], chatReq("c2", "a"))
	other := nodes[1]
	if d.Peer == nodes[1].host.ID() {
		other = nodes[2]
	}
	r := chatReq("c2", "b")
	r.Peer = other.host.ID()
	d = delegateAndWait(t, nodes[0], r)
	if d.Peer != other.host.ID() || !carriesHistory(t, d) {
		t.Fatalf("named peer: ran on %s, carried %v", d.Peer, carriesHistory(t, d))
	}
	if got := historyText(log.last(t).history); got != "a>re: a" {
		t.Fatalf("named peer's history %q", got)
	}
}

func TestContextBadHistoryRejected(t *testing.T) {
	nodes, log := contextMesh(t)
	big, err := json.Marshal(historyDoc{Version: historyVersion, Turns: []historyTurn{{
		Turn: executor.Turn{Task: strings.Repeat("x", store.DefaultMaxTurnBytes)},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		ctxID  protocol.ContextID
		doc    []byte
		reason protocol.RejectReason
		detail string
	}{
		"malformed":      {"c", []byte(`{"version":1,"turns":[{"task":3}]}`), protocol.ReasonNotAllowed, "malformed context history"},
		"unknown field":  {"c", []byte(`{"version":1,"turns":[],"x":1}`), protocol.ReasonNotAllowed, "unknown field"},
		"version":        {"c", []byte(`{"version":9,"turns":[]}`), protocol.ReasonNotAllowed, "version 9"},
		"no context":     {"", []byte(`{"version":1,"turns":[]}`), protocol.ReasonNotAllowed, "without a context id"},
		"over the bound": {"c", big, protocol.ReasonPayloadTooLarge, "keeps at most"},
	} {
		t.Run(name, func(t *testing.T) {
			task := textTask("q")
			task.Parts = append(task.Parts, protocol.FilePart(protocol.File{MediaType: HistoryMediaType, Bytes: tc.doc}))
			d := delegateAndWait(t, nodes[0], Request{Profile: "chat", Peer: nodes[1].host.ID(), ContextID: tc.ctxID, Task: task})
			if d.State != protocol.StateRejected || !strings.HasPrefix(d.Reason, tc.reason.String()) || !strings.Contains(d.Reason, tc.detail) {
				t.Fatalf("%s (%s), want rejected %s mentioning %q", d.State, d.Reason, tc.reason, tc.detail)
			}
		})
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.runs) != 0 {
		t.Fatalf("%d bad offers ran", len(log.runs))
	}
}

// A local profile's executor gets the context's history from this node's
// own records.
func TestContextLocalHistory(t *testing.T) {
	log := &chatLog{}
	nodes := newMesh(t, 1, func(_ int, c *Config) {
		c.Profiles = append(c.Profiles, Profile{Profile: protocol.Profile{Name: "chat", MaxBudgetTokens: 100}, Executor: log.handler(0)})
	})
	for _, text := range []string{"l1", "l2"} {
		if d := delegateAndWait(t, nodes[0], chatReq("local", text)); d.State != protocol.StateCompleted {
			t.Fatalf("%s: %s (%s)", text, d.State, d.Reason)
		}
	}
	if got := historyText(log.last(t).history); got != "l1>re: l1" {
		t.Fatalf("local history %q", got)
	}
}

func TestDecodeHistory(t *testing.T) {
	id := protocol.NewDelegationID()
	ok := fmt.Sprintf(`{"version":1,"turns":[{"delegation":%q,"profile":"chat","task":"q","data":[{"a":1}],"result":"r"}]}`, id)
	h, err := decodeHistory([]byte(ok))
	if err != nil || len(h.Turns) != 1 || h.Turns[0].Task != "q" || h.Turns[0].Result != "r" || string(h.Turns[0].Data[0]) != `{"a":1}` {
		t.Fatalf("decode %s: %+v, %v", ok, h, err)
	}
	for name, in := range map[string]string{
		"empty":       ``,
		"not object":  `[]`,
		"trailing":    `{"version":1,"turns":[]} {}`,
		"bad id":      `{"version":1,"turns":[{"delegation":"zz","task":"","result":""}]}`,
		"bad profile": `{"version":1,"turns":[{"profile":"a b","task":"","result":""}]}`,
		"data array":  `{"version":1,"turns":[{"task":"","data":[[1]],"result":""}]}`,
		"too many":    `{"version":1,"turns":[` + strings.Repeat(`{"task":"","result":""},`, maxHistoryTurns) + `{"task":"","result":""}]}`,
	} {
		if _, err := decodeHistory([]byte(in)); !errors.Is(err, ErrBadHistory) {
			t.Errorf("%s: err %v, want ErrBadHistory", name, err)
		}
	}
	two := []protocol.Part{
		protocol.FilePart(protocol.File{MediaType: HistoryMediaType, Bytes: []byte(`{"version":1,"turns":[]}`)}),
		protocol.FilePart(protocol.File{MediaType: HistoryMediaType, Bytes: []byte(`{"version":1,"turns":[]}`)}),
	}
	if _, _, err := splitHistory(two); !errors.Is(err, ErrBadHistory) {
		t.Errorf("two history parts: err %v, want ErrBadHistory", err)
	}
	byURI := []protocol.Part{protocol.FilePart(protocol.File{MediaType: HistoryMediaType, URI: "https://example.invalid/h"})}
	if _, _, err := splitHistory(byURI); !errors.Is(err, ErrBadHistory) {
		t.Errorf("history by URI: err %v, want ErrBadHistory", err)
	}
}

func FuzzDecodeHistory(f *testing.F) {
	f.Add([]byte(`{"version":1,"turns":[{"delegation":"00112233445566778899aabbccddeeff","profile":"chat","task":"q","data":[{"a":1}],"result":"r"}]}`))
	f.Add([]byte(`{"version":1,"turns":[]}`))
	f.Add([]byte(`{"version":1,"turns":[{"task":"\ud800","result":""}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHistory(b)
		if err != nil {
			if !errors.Is(err, ErrBadHistory) {
				t.Fatalf("error %v is not ErrBadHistory", err)
			}
			return
		}
		// What decodes encodes, and decodes again the same.
		p, err := historyPart(h.Turns)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeHistory(p.File.Bytes)
		if err != nil || len(again.Turns) != len(h.Turns) {
			t.Fatalf("round trip: %v (%d turns, want %d)", err, len(again.Turns), len(h.Turns))
		}
	})
}
