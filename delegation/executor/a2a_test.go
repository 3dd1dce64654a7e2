package executor

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// testAgent is an a2a-go agent: it streams the task's words as artifact
// chunks, or hangs until cancelled when the text is "hang". "ask" makes it
// ask a question (input-required); the answer, sent to the same task,
// completes it with "color: <answer>".
type testAgent struct {
	cancelled chan a2a.TaskID
}

func (a *testAgent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		text := ec.Message.Parts[0].Text()
		if ec.StoredTask != nil { // the answer to "ask"
			e := a2a.NewArtifactUpdateEvent(ec, "out", a2a.NewTextPart("color: "+text))
			e.Append = false
			if yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) && yield(e, nil) {
				yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
			}
			return
		}
		if text == "ask" {
			q := a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart("which color?"))
			if yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
				yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateInputRequired, q), nil)
			}
			return
		}
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) ||
			!yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
		}
		if text == "context" {
			// Says what it was given of the task's context.
			hist, _ := json.Marshal(ec.Metadata["kithContextHistory"])
			e := a2a.NewArtifactUpdateEvent(ec, "out", a2a.NewTextPart(ec.ContextID+" "+string(hist)))
			e.Append = false
			if yield(e, nil) {
				yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
			}
			return
		}
		if text == "hang" {
			// One chunk, so a client knows the task runs, then nothing.
			e := a2a.NewArtifactUpdateEvent(ec, "out", a2a.NewTextPart("started "))
			e.Append = false
			if !yield(e, nil) {
				return
			}
			<-ctx.Done()
			return
		}
		for i, w := range strings.SplitAfter(text, " ") {
			e := a2a.NewArtifactUpdateEvent(ec, "out", a2a.NewTextPart(w))
			e.Append = i > 0
			if !yield(e, nil) {
				return
			}
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (a *testAgent) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		select {
		case a.cancelled <- ec.TaskID:
		default:
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// serveAgent serves agent over JSON-RPC (v1.0, or v0.3 when legacy) with
// its card, requiring token when it is not empty.
func serveAgent(t *testing.T, agent *testAgent, legacy bool, token string) *httptest.Server {
	t.Helper()
	h := a2asrv.NewHandler(agent)
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	version := a2a.Version
	rpc := a2asrv.NewJSONRPCHandler(h)
	if legacy {
		version, rpc = a2av0.Version, a2av0.NewJSONRPCHandler(h)
	}
	card := &a2a.AgentCard{
		Name: "test", Description: "test agent", Version: "1",
		SupportedInterfaces: []*a2a.AgentInterface{{URL: srv.URL + "/rpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: version}},
		Capabilities:        a2a.AgentCapabilities{Streaming: true},
		Skills:              []a2a.AgentSkill{{ID: "echo", Name: "echo", Description: "echo", Tags: []string{}}},
	}
	mux.Handle("/.well-known/agent-card.json", a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/rpc", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		rpc.ServeHTTP(w, r)
	}))
	return srv
}

func TestA2AStreams(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		name := "v1.0"
		if legacy {
			name = "v0.3"
		}
		t.Run(name, func(t *testing.T) {
			srv := serveAgent(t, &testAgent{cancelled: make(chan a2a.TaskID, 1)}, legacy, "s3cret")
			x := &A2A{URL: srv.URL, Token: "s3cret"}
			var got []string
			res, err := x.Execute(context.Background(), Task{Text: "one two three", BudgetTokens: 100}, func(u Update) { got = append(got, u.Text) })
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if res.Text != "one two three" || strings.Join(got, "") != res.Text || len(got) != 3 {
				t.Fatalf("result %q, updates %q", res.Text, got)
			}
			if res.StoppedAtBudget {
				t.Fatal("StoppedAtBudget without reaching the budget")
			}
		})
	}
}

// The agent gets the task's context id, to keep its own state under, and
// the context's earlier turns.
func TestA2AContext(t *testing.T) {
	srv := serveAgent(t, &testAgent{}, false, "")
	task := Task{Text: "context", ContextID: "conv-1", History: []Turn{{Task: "q", Result: "a"}}}
	res, err := (&A2A{URL: srv.URL}).Execute(context.Background(), task, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `conv-1 [{"result":"a","task":"q"}]`; res.Text != want { // a map once decoded: keys sorted
		t.Fatalf("agent saw %q, want %q", res.Text, want)
	}
}

func TestA2AWrongToken(t *testing.T) {
	srv := serveAgent(t, &testAgent{}, false, "s3cret")
	_, err := (&A2A{URL: srv.URL, Token: "wrong"}).Execute(context.Background(), Task{Text: "x"}, nil)
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("err = %v, want ErrFailed", err)
	}
}

func TestA2ABudgetCutsAndCancels(t *testing.T) {
	agent := &testAgent{cancelled: make(chan a2a.TaskID, 1)}
	srv := serveAgent(t, agent, false, "")
	res, err := (&A2A{URL: srv.URL}).Execute(context.Background(), Task{Text: "aaaa bbbb cccc dddd", BudgetTokens: 2}, nil)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if !res.StoppedAtBudget || len(res.Text) > 8 {
		t.Fatalf("result %+v, want at most 8 bytes and StoppedAtBudget", res)
	}
}

func TestA2ACancelReachesAgent(t *testing.T) {
	agent := &testAgent{cancelled: make(chan a2a.TaskID, 1)}
	srv := serveAgent(t, agent, false, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := (&A2A{URL: srv.URL}).Execute(ctx, Task{Text: "hang"}, func(Update) {
			select {
			case running <- struct{}{}:
			default:
			}
		})
		done <- err
	}()
	select {
	case <-running: // the executor knows the remote task now
	case err := <-done:
		t.Fatalf("Execute ended before the cancel: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	select {
	case <-agent.cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent was never asked to cancel")
	}
}

func TestA2AHangingAgentFailsTyped(t *testing.T) {
	srv := serveAgent(t, &testAgent{cancelled: make(chan a2a.TaskID, 1)}, false, "")
	_, err := (&A2A{URL: srv.URL, IdleTimeout: 300 * time.Millisecond}).Execute(context.Background(), Task{Text: "hang"}, nil)
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "sent nothing") {
		t.Fatalf("err = %v, want ErrFailed for an idle agent", err)
	}
}

func TestA2ABadAgents(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	badCard := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"name": 1`))
	}))
	defer badCard.Close()
	var garbage *httptest.Server
	garbage = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "agent-card.json") {
			_, _ = w.Write([]byte(`{"name":"g","description":"g","version":"1","capabilities":{"streaming":true},"skills":[],
				"supportedInterfaces":[{"url":"` + garbage.URL + `/rpc","protocolBinding":"JSONRPC","protocolVersion":"1.0"}]}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {not json\n\n"))
	}))
	defer garbage.Close()
	for name, url := range map[string]string{"unreachable": closed.URL, "bad card": badCard.URL, "malformed events": garbage.URL} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := (&A2A{URL: url}).Execute(ctx, Task{Text: "x"}, nil)
			if !errors.Is(err, ErrFailed) {
				t.Fatalf("err = %v, want ErrFailed", err)
			}
		})
	}
}

// TestA2AInputRequired: the agent's question pauses the task with the
// agent's task in Resume; the next call sends the answer to that task and
// gets its result.
func TestA2AInputRequired(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		name := "v1.0"
		if legacy {
			name = "v0.3"
		}
		t.Run(name, func(t *testing.T) {
			srv := serveAgent(t, &testAgent{cancelled: make(chan a2a.TaskID, 1)}, legacy, "")
			x := &A2A{URL: srv.URL}
			task := Task{Text: "ask", BudgetTokens: 100, ContextID: "c1"}
			res, err := x.Execute(context.Background(), task, nil)
			if err != nil {
				t.Fatalf("first turn: %v", err)
			}
			if res.Input == nil || res.Input.Question != "which color?" || len(res.Input.Resume) == 0 {
				t.Fatalf("first turn result %+v, want the agent's question", res)
			}
			task.Exchanges = []Exchange{{Question: res.Input.Question, Resume: res.Input.Resume, Answer: "blue"}}
			res, err = x.Execute(context.Background(), task, nil)
			if err != nil {
				t.Fatalf("second turn: %v", err)
			}
			if res.Input != nil || res.Text != "color: blue" {
				t.Fatalf("second turn result %+v", res)
			}
			// A resume state that names no task fails typed.
			task.Exchanges[0].Resume = []byte("{}")
			if _, err := x.Execute(context.Background(), task, nil); !errors.Is(err, ErrFailed) {
				t.Fatalf("bad resume: %v", err)
			}
		})
	}
}
