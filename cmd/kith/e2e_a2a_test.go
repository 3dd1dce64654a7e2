package main

// The A2A gateway end to end: the official JavaScript SDK (@a2a-js/sdk,
// interop/a2a-js) against two real daemons, A's gateway and profiles that
// only B serves, over the mesh.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/gateway"
)

// interopDir is the Node project of the interop script.
const interopDir = "../../interop/a2a-js"

// needInterop skips when node or the npm packages are missing, and fails
// instead under KITH_A2A_INTEROP_REQUIRED=1 (set by .ci/run, which runs
// npm ci first): a skipped interop test proves nothing.
func needInterop(t *testing.T) string {
	t.Helper()
	why := ""
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		why = "node is not installed (apt-get install nodejs npm)"
	} else if _, err := os.Stat(filepath.Join(interopDir, "node_modules", "@a2a-js", "sdk")); err != nil {
		why = "npm packages missing: run (cd interop/a2a-js && npm ci)"
	}
	if why == "" {
		return nodeBin
	}
	labtest.Lacking(t, labtest.InteropRequired, "A2A interop test cannot run: "+why)
	return ""
}

const a2aProviderConfig = `
[[profiles]]
name = "remote-echo"
description = "echo, served by B"
executor = "echo"
min_trust = "untrusted"

[[profiles]]
name = "slow"
description = "a task that runs until cancelled"
executor = "exec"
command = ["sleep", "300"]
min_trust = "untrusted"
`

const a2aGatewayConfig = `
[api]
listen = "127.0.0.1:0"
require_token = true
`

// httpBase is the gateway's base URL, from the daemon's /node.
func (n *testNode) httpBase() string {
	n.t.Helper()
	c := n.client()
	defer c.Close()
	info, err := c.Node(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	if info.HTTPAddr == "" {
		n.t.Fatalf("%s: no HTTP listener", n.name)
	}
	return "http://" + info.HTTPAddr
}

// waitSkill polls A's node card until it lists every profile in names
// (A learns B's profiles from B's signed capabilities).
func waitSkill(t *testing.T, base string, names ...string) {
	t.Helper()
	deadline := time.Now().Add(stateWait)
	for {
		card, err := gateway.FetchCard(context.Background(), http.DefaultClient, base)
		missing := ""
		if err == nil {
			for _, n := range names {
				found := false
				for _, s := range card.Skills {
					found = found || s.ID == n
				}
				if !found {
					missing = n
				}
			}
			if missing == "" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node card at %s never listed %v (missing %q, err %v)", base, names, missing, err)
		}
		time.Sleep(pollEvery)
	}
}

// runInterop runs one phase of interop.mjs and returns its JSON summary.
func runInterop(t *testing.T, nodeBin string, args ...string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, append([]string{"interop.mjs"}, args...)...)
	cmd.Dir = interopDir
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node interop.mjs %s: %v\nstdout:\n%s\nstderr:\n%s", args[0], err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var out map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		t.Fatalf("interop.mjs summary is not JSON: %v\n%s", err, stdout.String())
	}
	t.Logf("interop.mjs %s %v: %s", args[0], args[len(args)-1], lines[len(lines)-1])
	return out
}

func TestA2AInteropJSSDK(t *testing.T) {
	nodeBin := needInterop(t)
	a, b := pair(t, a2aProviderConfig)
	// pair started A without the listener.
	token := a.enableGateway(t)
	if !strings.HasPrefix(token, "kith_") {
		t.Fatalf("kith api token printed %q", token)
	}
	base := a.httpBase()
	waitSkill(t, base, "remote-echo", "slow")
	r := a.kith("card", "verify", base+"/a2a/remote-echo/.well-known/agent-card.json")
	r.mustSucceed(t)
	if !strings.Contains(r.stdout, "signed by "+a.id) {
		t.Fatalf("card verify: %v", r)
	}

	// The REST API on the listener: the token is required, and the SSE
	// stream of every delegation event sees the A2A tasks.
	if resp, err := http.Get(base + "/api/v1/a2a/node"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("REST without token: %v %v, want 401", resp, err)
	}
	events := followEvents(t, base, token)

	for _, mode := range []string{"v1.0", "legacy"} {
		t.Run(mode, func(t *testing.T) {
			extra := []string{}
			if mode == "legacy" {
				extra = append(extra, "legacy")
			}
			p1 := runInterop(t, nodeBin, append([]string{"phase1", base, token, "remote-echo"}, extra...)...)
			taskID, _ := p1["taskId"].(string)
			// The task is the delegation: B served it over the mesh.
			if d := showJSON(t, a, taskID); d.State.String() != "completed" || d.Peer != b.id || !d.Remote {
				t.Fatalf("A's delegation %s: %+v, want completed by B", taskID, d)
			}

			if events != nil {
				waitEvent(t, events, `"id":"`+taskID+`"`, `"state":"completed"`)
				events = nil // the stream ends with the restart
			}

			a.restartSamePorts()
			base = a.httpBase()
			waitSkill(t, base, "remote-echo", "slow")

			p2 := runInterop(t, nodeBin, append([]string{"phase2", base, token, "remote-echo", "slow", taskID}, extra...)...)
			cancelled, _ := p2["cancelledTaskId"].(string)
			deadline := time.Now().Add(stateWait)
			for {
				d := showJSON(t, b, cancelled)
				if d.State.String() == "cancelled" && d.Role.String() == "provider" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("B's delegation %s is %s, want cancelled", cancelled, d.State)
				}
				time.Sleep(pollEvery)
			}
		})
	}
}

// followEvents reads GET /api/v1/a2a/events (server-sent events) in the
// background and delivers its data lines.
func followEvents(t *testing.T, base, token string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/a2a/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET /events: %v %v", resp, err)
	}
	lines := make(chan string, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				select {
				case lines <- d:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	return lines
}

// waitEvent waits for an event line that contains every one of want.
func waitEvent(t *testing.T, lines <-chan string, want ...string) {
	t.Helper()
	timeout := time.After(stateWait)
	for {
		select {
		case l := <-lines:
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(l, w)
			}
			if ok {
				return
			}
		case <-timeout:
			t.Fatalf("no event with %q on /events", want)
		}
	}
}

// upperAgent is an a2a-go agent: it streams the task's words in upper
// case, or, for "hang", runs until it is cancelled (and says so).
type upperAgent struct{ cancelled, running chan struct{} }

func (a *upperAgent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		text := ec.Message.Parts[0].Text()
		if !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) ||
			!yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
			return
		}
		if text == "hang" {
			select {
			case a.running <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return
		}
		for i, w := range strings.SplitAfter(strings.ToUpper(text), " ") {
			e := a2a.NewArtifactUpdateEvent(ec, "out", a2a.NewTextPart(w))
			e.Append = i > 0
			if !yield(e, nil) {
				return
			}
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (a *upperAgent) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		select {
		case a.cancelled <- struct{}{}:
		default:
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// TestE2EA2AExecutor: B's profile forwards to an a2a-go agent (in this
// process, on loopback, behind a bearer token from B's environment); A
// delegates to it over the mesh, and A's cancel reaches the agent.
func TestE2EA2AExecutor(t *testing.T) {
	agent := &upperAgent{cancelled: make(chan struct{}, 1), running: make(chan struct{}, 1)}
	const token = "agent-s3cret"
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	defer srv.Close()
	rpc := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(agent, a2asrv.WithLogger(slog.New(slog.DiscardHandler))))
	mux.Handle("/.well-known/agent-card.json", a2asrv.NewStaticAgentCardHandler(&a2a.AgentCard{
		Name: "upper", Description: "upper case", Version: "1", Capabilities: a2a.AgentCapabilities{Streaming: true},
		SupportedInterfaces: []*a2a.AgentInterface{{URL: srv.URL + "/rpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version}},
		Skills:              []a2a.AgentSkill{{ID: "upper", Name: "upper", Description: "upper", Tags: []string{}}},
	}))
	mux.Handle("/rpc", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "token", http.StatusUnauthorized)
			return
		}
		rpc.ServeHTTP(w, r)
	}))
	t.Setenv("KITH_TEST_AGENT_TOKEN", token)
	a, b := pair(t, fmt.Sprintf(`
[[profiles]]
name = "fwd"
executor = "a2a"
url = %q
api_key_env = "KITH_TEST_AGENT_TOKEN"
min_trust = "untrusted"
`, srv.URL))

	r := a.kith("delegate", "--profile", "fwd", "--peer", b.id, "--budget", "100", "shout this")
	r.mustSucceed(t)
	if r.stdout != "SHOUT THIS\n" {
		t.Fatalf("delegate to the a2a profile: stdout %q, want %q", r.stdout, "SHOUT THIS\n")
	}
	mustVerify(t, a, delegationID(t, r), b, "completed")

	c := a.client()
	defer c.Close()
	id, err := c.Delegate(context.Background(), api.DelegateRequest{Profile: "fwd", Peer: b.id, Text: "hang", Budget: 100})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-agent.running:
	case <-time.After(stateWait):
		t.Fatal("the agent never got the long task")
	}
	a.kith("tasks", "cancel", id).mustSucceed(t)
	select {
	case <-agent.cancelled:
	case <-time.After(stateWait):
		t.Fatal("the cancel never reached the agent")
	}
}

// jsAgent runs interop/a2a-js/agent.mjs (the JavaScript SDK's server) and
// returns its URL and the lines it prints afterwards.
func jsAgent(t *testing.T, nodeBin, version string) (string, <-chan string) {
	t.Helper()
	cmd := exec.Command(nodeBin, "agent.mjs", version)
	cmd.Dir = interopDir
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent.mjs %s stderr:\n%s", version, stderr.String())
		}
	})
	select {
	case l, ok := <-lines:
		var m struct{ URL string }
		if !ok || json.Unmarshal([]byte(l), &m) != nil || m.URL == "" {
			t.Fatalf("agent.mjs %s did not start: %q\n%s", version, l, stderr.String())
		}
		return m.URL, lines
	case <-time.After(commandWait):
		t.Fatalf("agent.mjs %s did not start", version)
	}
	return "", nil
}

// TestA2AExecutorJSAgent: B's a2a profiles forward to agents built with
// the JavaScript SDK's server, one speaking v1.0 and one v0.3; A delegates
// over the mesh, and A's cancel becomes the agent's cancelTask.
func TestA2AExecutorJSAgent(t *testing.T) {
	nodeBin := needInterop(t)
	url10, lines10 := jsAgent(t, nodeBin, "1.0")
	url03, lines03 := jsAgent(t, nodeBin, "0.3")
	a, b := pair(t, fmt.Sprintf(`
[[profiles]]
name = "js10"
executor = "a2a"
url = %q
min_trust = "untrusted"

[[profiles]]
name = "js03"
executor = "a2a"
url = %q
min_trust = "untrusted"
`, url10, url03))
	for profile, lines := range map[string]<-chan string{"js10": lines10, "js03": lines03} {
		t.Run(profile, func(t *testing.T) {
			r := a.kith("delegate", "--profile", profile, "--peer", b.id, "--budget", "100", "shout this")
			r.mustSucceed(t)
			if r.stdout != "SHOUT THIS\n" {
				t.Fatalf("delegate to %s: stdout %q, want %q", profile, r.stdout, "SHOUT THIS\n")
			}
			c := a.client()
			defer c.Close()
			id, err := c.Delegate(context.Background(), api.DelegateRequest{Profile: profile, Peer: b.id, Text: "hang", Budget: 100})
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(stateWait)
			for showJSON(t, b, id).State.String() != "running" {
				if time.Now().After(deadline) {
					t.Fatalf("B never ran %s", id)
				}
				time.Sleep(pollEvery)
			}
			a.kith("tasks", "cancel", id).mustSucceed(t)
			select {
			case l := <-lines:
				if !strings.Contains(l, `"cancelled"`) {
					t.Fatalf("agent printed %q, want a cancel", l)
				}
			case <-time.After(stateWait):
				t.Fatal("the cancel never reached the JavaScript agent")
			}
		})
	}
}

// enableGateway gives a node started without the HTTP listener its [api]
// table, restarts it on the same ports, and returns its API token.
func (n *testNode) enableGateway(t *testing.T) string {
	t.Helper()
	path := filepath.Join(n.home, "config.toml")
	cfg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(mergeConfig(string(cfg), a2aGatewayConfig)), 0o600); err != nil {
		t.Fatal(err)
	}
	n.restartSamePorts()
	return strings.TrimSpace(n.kith("api", "token").stdout)
}

// bearer adds the node's API token to every request of an HTTP client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestE2EA2ALargeDocument: an A2A client sends a document of several MiB
// through A's gateway, on the default [api] limits, to a profile that only
// B serves, and gets it back whole, blocking and streamed. A body cap of
// 1 MiB refused such a request (413) although the mesh carries 64 MiB;
// streamed, an output of 12 MiB came as one event that a2a-go's client
// refused.
func TestE2EA2ALargeDocument(t *testing.T) {
	a, b := pair(t, `
[[profiles]]
name = "bigecho"
executor = "echo"
max_budget_tokens = 4000000
min_trust = "untrusted"
`)
	token := a.enableGateway(t)
	base := a.httpBase()
	waitSkill(t, base, "bigecho")
	hc := &http.Client{Transport: bearer{token}}
	card, err := gateway.FetchCard(context.Background(), hc, base+"/a2a/bigecho")
	if err != nil {
		t.Fatal(err)
	}
	c, err := a2aclient.NewFromCard(context.Background(), card, a2aclient.WithDefaultsDisabled(), a2aclient.WithJSONRPCTransport(hc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	doc := strings.Repeat("A line of a long report, with \"quotes\" and a tab\there.\n", 3<<20/56)
	ctx, cancel := context.WithTimeout(context.Background(), stateWait)
	defer cancel()
	res, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(doc))})
	if err != nil {
		t.Fatalf("SendMessage of %d bytes: %v", len(doc), err)
	}
	task, ok := res.(*a2a.Task)
	if !ok || task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) == 0 {
		t.Fatalf("SendMessage of %d bytes: %T %+v, want a completed task", len(doc), res, res)
	}
	if got := task.Artifacts[len(task.Artifacts)-1].Parts[0].Text(); got != doc {
		t.Fatalf("the echo came back with %d bytes, sent %d", len(got), len(doc))
	}
	if d := showJSON(t, a, string(task.ID)); d.State.String() != "completed" || d.Peer != b.id {
		t.Fatalf("A's delegation %s: %+v, want completed by B", task.ID, d)
	}

	// Streamed, an output larger than one server-sent event that a2a-go
	// reads (10 MB) comes in several artifact updates, appended in order.
	doc = strings.Repeat(doc, 4) // 12 MiB
	var parts a2a.ContentParts
	state := a2a.TaskState("")
	for ev, err := range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(doc))}) {
		if err != nil {
			t.Fatalf("SendStreamingMessage of %d bytes: %v", len(doc), err)
		}
		switch e := ev.(type) {
		case *a2a.TaskArtifactUpdateEvent:
			if !e.Append {
				parts = nil
			}
			parts = append(parts, e.Artifact.Parts...)
		case *a2a.TaskStatusUpdateEvent:
			state = e.Status.State
		}
	}
	var got strings.Builder
	for _, p := range parts {
		got.WriteString(p.Text())
	}
	if state != a2a.TaskStateCompleted || got.String() != doc {
		t.Fatalf("streamed %d bytes: ended %s with %d bytes of output in %d parts", len(doc), state, got.Len(), len(parts))
	}

	// Blocking, the answer to a message of megabytes carries the output,
	// not the message back, unless the client asks for history.
	res, err = c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(doc))})
	if err != nil {
		t.Fatalf("SendMessage of %d bytes: %v", len(doc), err)
	}
	if task, ok = res.(*a2a.Task); !ok || task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) == 0 ||
		task.Artifacts[0].Parts[0].Text() != doc || len(task.History) != 0 {
		t.Fatalf("SendMessage of %d bytes: %T, want a completed task with the output and no history", len(doc), res)
	}
}
