package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

type noDialer struct{}

func (noDialer) OpenStream(context.Context, peer.ID) (delegation.Stream, error) {
	return nil, errors.New("no network in this test")
}

// slowExec runs until cancelled.
type slowExec struct{}

func (slowExec) Execute(ctx context.Context, _ executor.Task, emit func(executor.Update)) (executor.Result, error) {
	emit(executor.Update{Text: "working ", Progress: -1})
	<-ctx.Done()
	return executor.Result{}, ctx.Err()
}

type testGateway struct {
	srv *httptest.Server
	st  *store.Store
	eng *delegation.Engine
	gw  *Gateway
}

// newTestGateway serves a gateway over a real engine and an in-memory
// store with a local "echo" (budget at most 100) and a "slow" profile.
func newTestGateway(t *testing.T) *testGateway {
	t.Helper()
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenInMemory(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := delegation.New(delegation.Config{
		Identity: id, Store: st, Dialer: noDialer{},
		Profiles: []delegation.Profile{
			{Profile: protocol.Profile{Name: "echo", MaxBudgetTokens: 100}, Executor: executor.Echo{}},
			{Profile: protocol.Profile{Name: "slow", MaxBudgetTokens: 100}, Executor: slowExec{}},
			{Profile: protocol.Profile{Name: "ask", MaxBudgetTokens: 100}, Executor: executor.HandlerFunc(askColor)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	<-eng.Started() // else a first request may find it not yet running
	tg := &testGateway{st: st, eng: eng}
	tg.gw = New(Config{
		Engine: eng, Store: st, Identity: id, BaseURL: func() string { return tg.srv.URL },
		MaxBodyBytes: 64 << 10, Version: "test",
	})
	tg.srv = httptest.NewServer(tg.gw.Handler())
	t.Cleanup(func() {
		tg.srv.Close()
		cancel()
		<-done
		st.Close()
	})
	return tg
}

func (tg *testGateway) count(t *testing.T) int {
	t.Helper()
	ds, err := tg.st.ListDelegations(store.DelegationFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(ds)
}

func (tg *testGateway) client(t *testing.T, profile string, transport a2a.TransportProtocol) *a2aclient.Client {
	t.Helper()
	card, ok, err := tg.gw.ProfileCard(profile)
	if err != nil || !ok {
		t.Fatalf("ProfileCard(%s): %v %v", profile, ok, err)
	}
	c, err := a2aclient.NewFromCard(context.Background(), card, a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []a2a.TransportProtocol{transport}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

func textMsg(s string) *a2a.SendMessageRequest {
	return &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(s))}
}

// Bad input gets the standard error and changes nothing in the store.
func TestBadInput(t *testing.T) {
	tg := newTestGateway(t)
	big := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"` +
		strings.Repeat("x", 70<<10) + `"}]}}}`
	send := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`
	cases := []struct {
		name, method, path, ctype, version, body string
		status, code                             int
	}{
		{"malformed JSON", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":`, 200, -32700},
		{"not UTF-8", "POST", "/a2a/echo", "application/json", "1.0", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}", 200, -32700},
		{"batch", "POST", "/a2a/echo", "application/json", "1.0", `[` + send + `]`, 200, -32600},
		{"no jsonrpc", "POST", "/a2a/echo", "application/json", "1.0", `{"id":1,"method":"GetTask","params":{}}`, 200, -32600},
		{"notification", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","method":"SendMessage","params":{}}`, 200, -32600},
		{"id is an object", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","id":{},"method":"GetTask"}`, 200, -32600},
		{"params an array", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}`, 200, -32600},
		{"unknown method", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","id":1,"method":"DoMagic","params":{}}`, 200, -32601},
		{"v1.0 method on a v0.3 request", "POST", "/a2a/echo", "application/json", "", send, 200, -32601},
		{"v0.3 method on a v1.0 request", "POST", "/a2a/echo", "application/json", "1.0", strings.Replace(send, "SendMessage", "message/send", 1), 200, -32601},
		{"unknown version", "POST", "/a2a/echo", "application/json", "2.0", send, 200, -32009},
		{"oversized body", "POST", "/a2a/echo", "application/json", "1.0", big, 413, -32600},
		{"wrong content type", "POST", "/a2a/echo", "text/plain", "1.0", send, 415, -32600},
		{"GET on JSON-RPC", "GET", "/a2a/echo", "", "1.0", "", 405, -32600},
		{"unknown task", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"00000000000000000000000000000000"}}`, 200, -32001},
		{"not a task id", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","id":1,"method":"CancelTask","params":{"id":"nope"}}`, 200, -32001},
		{"no parts", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[]}}}`, 200, -32602},
		{"bad budget", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"x"}],"metadata":{"budgetTokens":-3}}}}`, 200, -32602},
		{"push config", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","id":1,"method":"GetTaskPushNotificationConfig","params":{"taskId":"x","id":"y"}}`, 200, -32003},
		{"unknown profile", "POST", "/a2a/nope", "application/json", "1.0", send, 404, -32601},
		{"answer to an unknown task", "POST", "/a2a/echo", "application/json", "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","taskId":"00000000000000000000000000000000","role":"ROLE_USER","parts":[{"text":"x"}]}}}`, 200, -32001},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, tg.srv.URL+c.path, strings.NewReader(c.body))
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			if c.version != "" {
				req.Header.Set("A2A-Version", c.version)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var out struct {
				Error *struct {
					Code int `json:"code"`
				} `json:"error"`
			}
			if resp.StatusCode != c.status || json.Unmarshal(b, &out) != nil || out.Error == nil || out.Error.Code != c.code {
				t.Fatalf("status %d, body %s; want status %d and code %d", resp.StatusCode, b, c.status, c.code)
			}
		})
	}
	if n := tg.count(t); n != 0 {
		t.Fatalf("bad input left %d delegations in the store", n)
	}
}

func TestSendStreamGetListCancel(t *testing.T) {
	tg := newTestGateway(t)
	ctx := context.Background()
	for _, tr := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		t.Run(string(tr), func(t *testing.T) {
			c := tg.client(t, "echo", tr)
			res, err := c.SendMessage(ctx, textMsg("hello gateway"))
			if err != nil {
				t.Fatal(err)
			}
			task, ok := res.(*a2a.Task)
			if !ok || task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != 1 || task.Artifacts[0].Parts[0].Text() != "hello gateway" {
				t.Fatalf("SendMessage = %#v", res)
			}
			got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID})
			if err != nil || got.Status.State != a2a.TaskStateCompleted {
				t.Fatalf("GetTask = %v, %v", got, err)
			}

			var states []a2a.TaskState
			final := ""
			for ev, err := range c.SendStreamingMessage(ctx, textMsg("a b c")) {
				if err != nil {
					t.Fatal(err)
				}
				switch e := ev.(type) {
				case *a2a.Task:
					states = append(states, e.Status.State)
				case *a2a.TaskStatusUpdateEvent:
					states = append(states, e.Status.State)
				case *a2a.TaskArtifactUpdateEvent:
					if e.LastChunk {
						final = e.Artifact.Parts[0].Text()
					}
				}
			}
			if final != "a b c" || states[len(states)-1] != a2a.TaskStateCompleted {
				t.Fatalf("stream: states %v, final %q", states, final)
			}

			// A long task: returned at once, cancelled, and cancelled for good.
			slow := tg.client(t, "slow", tr)
			req := textMsg("forever")
			req.Config = &a2a.SendMessageConfig{ReturnImmediately: true}
			res, err = slow.SendMessage(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			id := res.(*a2a.Task).ID
			ct, err := slow.CancelTask(ctx, &a2a.CancelTaskRequest{ID: id})
			if err != nil || ct.Status.State != a2a.TaskStateCanceled {
				t.Fatalf("CancelTask = %v, %v", ct, err)
			}
			if _, err := slow.CancelTask(ctx, &a2a.CancelTaskRequest{ID: id}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
				t.Fatalf("second CancelTask: %v, want ErrTaskNotCancelable", err)
			}
			// The echo agent does not see the slow agent's task.
			if _, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: id}); !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Fatalf("GetTask of another profile's task: %v, want ErrTaskNotFound", err)
			}
		})
	}

	// Paging: 4 echo tasks (2 per transport), pages of 3.
	c := tg.client(t, "echo", a2a.TransportProtocolJSONRPC)
	var ids []a2a.TaskID
	token := ""
	for range 3 {
		page, err := c.ListTasks(ctx, &a2a.ListTasksRequest{PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range page.Tasks {
			ids = append(ids, task.ID)
		}
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	if len(ids) != 4 {
		t.Fatalf("ListTasks paged through %d tasks, want 4", len(ids))
	}
}

func TestRejectionIsA2AError(t *testing.T) {
	tg := newTestGateway(t)
	c := tg.client(t, "echo", a2a.TransportProtocolJSONRPC)
	req := textMsg("too much")
	req.Message.Metadata = map[string]any{"budgetTokens": 1000}
	_, err := c.SendMessage(context.Background(), req)
	var ae *a2a.Error
	if !errors.As(err, &ae) || !errors.Is(err, a2a.ErrInvalidParams) || ae.Details["reason"] != "budget_too_high" {
		t.Fatalf("err = %#v, want InvalidParams with reason budget_too_high", err)
	}
}

func TestCardsSignedAndVerified(t *testing.T) {
	tg := newTestGateway(t)
	for _, url := range []string{tg.srv.URL, tg.srv.URL + "/a2a/echo", tg.srv.URL + "/.well-known/agent.json"} {
		card, err := FetchCard(context.Background(), http.DefaultClient, url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyKithCard(card); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		card.Description += " (tampered)"
		if _, err := VerifyKithCard(card); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("%s tampered: %v, want ErrBadSignature", url, err)
		}
	}
	node, _ := tg.gw.NodeCard()
	if len(node.Skills) != 3 || node.Skills[0].ID != "ask" || node.Skills[1].ID != "echo" || node.Skills[2].ID != "slow" {
		t.Fatalf("node card skills = %+v", node.Skills)
	}
}

// The node agent takes a message for any profile named in metadata.
func TestNodeAgent(t *testing.T) {
	tg := newTestGateway(t)
	card, err := tg.gw.NodeCard()
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(context.Background(), card)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if _, err := c.SendMessage(context.Background(), textMsg("which one?")); !errors.Is(err, a2a.ErrInvalidParams) {
		t.Fatalf("no profile named: %v, want InvalidParams", err)
	}
	req := textMsg("to echo")
	req.Metadata = map[string]any{"profile": "echo"}
	res, err := c.SendMessage(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if task := res.(*a2a.Task); task.Status.State != a2a.TaskStateCompleted || task.Artifacts[0].Parts[0].Text() != "to echo" {
		t.Fatalf("SendMessage via the node agent = %+v", task)
	}
}

// SubscribeToTask follows a running task to its end; a finished task has
// nothing to subscribe to.
func TestSubscribeToTask(t *testing.T) {
	tg := newTestGateway(t)
	ctx := context.Background()
	c := tg.client(t, "slow", a2a.TransportProtocolJSONRPC)
	req := textMsg("forever")
	req.Config = &a2a.SendMessageConfig{ReturnImmediately: true}
	res, err := c.SendMessage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2a.Task).ID
	var last a2a.TaskState
	first := true
	for ev, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: id}) {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			if !first {
				t.Fatal("a second task snapshot")
			}
			// Cancel once subscribed: the stream must end canceled.
			go func() { _, _ = c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: id}) }()
		case *a2a.TaskStatusUpdateEvent:
			last = e.Status.State
		}
		first = false
	}
	if last != a2a.TaskStateCanceled {
		t.Fatalf("subscription ended at %s, want canceled", last)
	}
	for _, err := range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: id}) {
		if !errors.Is(err, a2a.ErrUnsupportedOperation) {
			t.Fatalf("subscribe to a finished task: %v, want UnsupportedOperation", err)
		}
	}
}

// askColor asks once, then answers with the answer.
func askColor(_ context.Context, task executor.Task, _ func(executor.Update)) (executor.Result, error) {
	if len(task.Exchanges) == 0 {
		return executor.AskInput("which color?"), nil
	}
	return executor.Result{Text: "color: " + task.Exchanges[0].Answer}, nil
}

// TestInputRequiredAnswered: a task that asks is INPUT_REQUIRED with the
// question as its status message; a message naming the task answers it
// and the task completes. A message naming a task that waits for nothing
// is refused and changes nothing.
func TestInputRequiredAnswered(t *testing.T) {
	tg := newTestGateway(t)
	for _, transport := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		t.Run(string(transport), func(t *testing.T) {
			c := tg.client(t, "ask", transport)
			ctx := context.Background()
			res, err := c.SendMessage(ctx, textMsg("paint"))
			if err != nil {
				t.Fatal(err)
			}
			task, ok := res.(*a2a.Task)
			if !ok || task.Status.State != a2a.TaskStateInputRequired {
				t.Fatalf("first answer %#v", res)
			}
			if task.Status.Message == nil || task.Status.Message.Parts[0].Text() != "which color?" {
				t.Fatalf("status message %+v, want the question", task.Status.Message)
			}
			reply := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("blue"))
			reply.TaskID, reply.ContextID = task.ID, task.ContextID
			res, err = c.SendMessage(ctx, &a2a.SendMessageRequest{Message: reply})
			if err != nil {
				t.Fatalf("answer: %v", err)
			}
			done, ok := res.(*a2a.Task)
			if !ok || done.ID != task.ID || done.Status.State != a2a.TaskStateCompleted {
				t.Fatalf("after the answer %#v", res)
			}
			if got := done.Artifacts[0].Parts[0].Text(); got != "color: blue" {
				t.Fatalf("output %q", got)
			}
			n := tg.count(t)
			again := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("red"))
			again.TaskID = task.ID
			if _, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: again}); !errors.Is(err, a2a.ErrUnsupportedOperation) {
				t.Fatalf("answer to a completed task: %v", err)
			}
			if tg.count(t) != n {
				t.Fatal("a refused answer stored a delegation")
			}
		})
	}
}

// TestStreamOfEndedTask: a task that a streamed message began streams its
// whole life, submitted, working, its output and its end, even when its
// delegation had ended before the stream began (a fast provider's result
// is stored with the requester's record, before Delegate returns).
func TestStreamOfEndedTask(t *testing.T) {
	tg := newTestGateway(t)
	ctx := context.Background()
	eng := tg.eng
	id, err := eng.Delegate(ctx, delegation.Request{Profile: "echo", Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("x y")}}, BudgetTokens: 50})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := eng.Wait(ctx, id); err != nil || d.State != protocol.StateCompleted {
		t.Fatalf("wait: %s, %v", d.State, err)
	}
	d, err := tg.st.GetDelegation(store.RoleRequester, id)
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{g: tg.gw, profile: "echo"}
	var seen []string
	a.stream(ctx, asCreated(d), func(ev a2a.Event, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		switch e := ev.(type) {
		case *a2a.Task:
			seen = append(seen, "task:"+string(e.Status.State))
		case *a2a.TaskStatusUpdateEvent:
			seen = append(seen, "status:"+string(e.Status.State))
		case *a2a.TaskArtifactUpdateEvent:
			if e.LastChunk {
				seen = append(seen, "output:"+e.Artifact.Parts[0].Text())
			}
		}
		return true
	})
	want := []string{"task:" + string(a2a.TaskStateSubmitted), "status:" + string(a2a.TaskStateWorking),
		"output:x y", "status:" + string(a2a.TaskStateCompleted)}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Fatalf("stream of a task that had ended: %v, want %v", seen, want)
	}
	// Streamed as it stands, the same task shows no work: what a task this
	// stream began must not look like.
	seen = nil
	a.stream(ctx, d, func(ev a2a.Event, err error) bool {
		if _, ok := ev.(*a2a.TaskStatusUpdateEvent); ok {
			seen = append(seen, "status:"+string(ev.(*a2a.TaskStatusUpdateEvent).Status.State))
		}
		return true
	})
	if strings.Contains(strings.Join(seen, " "), string(a2a.TaskStateWorking)) {
		t.Fatalf("the ended task as it stands streamed %v", seen)
	}
}
