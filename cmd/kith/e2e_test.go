package main

// End-to-end tests: real kith daemons on loopback, driven through the CLI
// the way a user would (harness in e2e_node_test.go).

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/protocol"
)

// pair starts two daemons, requester a and provider b (b with
// bConfig appended to its config), and has a add b as a static peer over
// TCP.
func pair(t *testing.T, bConfig string) (a, b *testNode) {
	t.Helper()
	dir := testDir(t)
	a = newNode(t, dir, "a", "")
	b = newNode(t, dir, "b", bConfig)
	a.start()
	b.start()
	a.kith("peers", "add", b.addr("/tcp/")).mustSucceed(t)
	return a, b
}

// pairNamed is pair, and b allows a by name ("kith peers allow"), which
// makes a verified on b: by default only verified peers may use b's
// profiles other than echo.
func pairNamed(t *testing.T, bConfig string) (a, b *testNode) {
	t.Helper()
	a, b = pair(t, bConfig)
	b.kith("peers", "allow", a.id).mustSucceed(t)
	return a, b
}

// shortID is how the CLI's tables abbreviate a peer ID.
func shortID(id string) string { return id[:6] + "…" + id[len(id)-6:] }

var delegationLine = regexp.MustCompile(`(?m)^delegation ([0-9a-f]{32})$`)

// delegationID returns the ID that "kith delegate" announced on stderr.
func delegationID(t *testing.T, r result) string {
	t.Helper()
	m := delegationLine.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no \"delegation <32 hex>\" line on stderr; %v", r)
	}
	return m[1]
}

// showJSON runs "kith tasks show" and decodes its JSON.
func showJSON(t *testing.T, n *testNode, id string) api.Delegation {
	t.Helper()
	r := n.kith("tasks", "show", id)
	r.mustSucceed(t)
	var d api.Delegation
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("tasks show is not JSON: %v; %v", err, r)
	}
	if d.ID != id {
		t.Fatalf("tasks show %s returned delegation %q", id, d.ID)
	}
	return d
}

// mustVerify runs "kith tasks verify" and requires a valid proof signed by
// provider.
func mustVerify(t *testing.T, n *testNode, id string, provider *testNode, state string) {
	t.Helper()
	r := n.kith("tasks", "verify", id)
	r.mustSucceed(t)
	for _, want := range []string{
		"valid: signed by " + provider.id + "\n",
		"requester  " + n.id + "\n",
		"state      " + state + "\n",
		// Both nodes run on this machine: the proof is made with the
		// digest it hashes fastest (protocol 1.6), and says which.
		"offer      " + protocol.FastestDigest().String() + ":",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("tasks verify output lacks %q; %v", want, r)
		}
	}
}

// TestE2EDelegateEcho: peers add and ls, a remote delegation to the echo
// profile through the CLI, and every way of looking at it afterwards; then
// an offer the provider cannot serve.
func TestE2EDelegateEcho(t *testing.T) {
	a, b := pair(t, "")

	r := a.kith("peers", "ls")
	r.mustSucceed(t)
	var row []string
	for _, l := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == b.id {
			row = f
		}
	}
	if row == nil {
		t.Fatalf("peers ls does not list b (%s); %v", b.id, r)
	}
	if row[1] != "true" || !strings.Contains(r.stdout, "static") {
		t.Errorf("peers ls: b should be connected and static; %v", r)
	}

	r = a.kith("delegate", "--profile", "echo", "--peer", b.id, "--budget", "100", "hello world")
	r.mustSucceed(t)
	if r.stdout != "hello world\n" {
		t.Errorf("delegate stdout = %q, want %q", r.stdout, "hello world\n")
	}
	id := delegationID(t, r)
	// The status lines follow the delegation's states as they happen: no
	// line may carry a state the delegation never had.
	var states []string
	for _, m := range regexp.MustCompile(`(?m)^\[([a-z_]+)\] ([a-z_]+)`).FindAllStringSubmatch(r.stderr, -1) {
		states = append(states, m[1]+" "+m[2])
		if !slices.Contains([]string{"accepted", "running", "completed"}, m[1]) {
			t.Errorf("status line %q names state %q; %v", m[0], m[1], r)
		}
	}
	for _, want := range []string{"accepted accepted", "running status", "completed result"} {
		if !slices.Contains(states, want) {
			t.Errorf("no [%s] line among the status lines %q; %v", strings.Replace(want, " ", "] ", 1), states, r)
		}
	}
	if !strings.Contains(r.stderr, id+" completed tokens=") || !strings.Contains(r.stderr, "/100\n") {
		t.Errorf("delegate stderr lacks the final \"%s completed tokens=N/100\" line; %v", id, r)
	}

	r = a.kith("tasks", "ls")
	r.mustSucceed(t)
	if !regexp.MustCompile(`(?m)^` + id + `\s+requester\s+echo\s+completed\s+` + regexp.QuoteMeta(shortID(b.id))).MatchString(r.stdout) {
		t.Errorf("tasks ls has no completed requester row for %s; %v", id, r)
	}

	d := showJSON(t, a, id)
	if d.State.String() != "completed" || !d.Remote || d.Peer != b.id || d.Role.String() != "requester" ||
		d.Profile != "echo" || d.Budget != 100 || d.Output != "hello world" || !d.Terminal {
		t.Errorf("tasks show: %+v; want a completed remote requester delegation of echo to %s, budget 100, output \"hello world\"", d, b.id)
	}
	if d.Usage.Completion == 0 || d.Usage.Completion > 100 {
		t.Errorf("tasks show: completion tokens %d, want 1..100", d.Usage.Completion)
	}

	mustVerify(t, a, id, b, "completed")

	r = a.kith("tasks", "tree")
	r.mustSucceed(t)
	if want := fmt.Sprintf("%s echo completed [⇄ %s]", id, shortID(b.id)); !strings.Contains(r.stdout, want) {
		t.Errorf("tasks tree lacks %q; %v", want, r)
	}

	// The provider keeps its own record of the work it did (written while
	// the result travelled: protocol 1.5, provisional results).
	if pd := b.waitFor(id, "completed", func(d api.Delegation) bool { return d.State.String() == "completed" }); pd.Role.String() != "provider" || pd.Peer != a.id {
		t.Errorf("b's record: %+v; want a completed provider delegation for %s", pd, a.id)
	}

	r = a.kith("delegate", "--profile", "nosuch", "--peer", b.id, "--budget", "100", "hello")
	if r.code == 0 || !strings.Contains(r.stderr, "no_matching_profile") || r.stdout != "" {
		t.Fatalf("delegate to a profile b lacks: want a non-zero exit, no_matching_profile on stderr and no stdout; %v", r)
	}
	if d := showJSON(t, a, delegationID(t, r)); d.State.String() != "rejected" || !strings.HasPrefix(d.Reason, "no_matching_profile") {
		t.Errorf("rejected delegation: state %s, reason %q; want rejected, no_matching_profile", d.State, d.Reason)
	}
}

// TestE2EExec: the exec executor runs the configured command on the
// provider, with the task on stdin; a failing command fails the delegation
// with its exit status and stderr.
func TestE2EExec(t *testing.T) {
	profiles := fmt.Sprintf(`[[profiles]]
name = "upper"
executor = "exec"
command = %s

[[profiles]]
name = "boom"
executor = "exec"
command = %s
`, tomlList("tr", "a-z", "A-Z"), tomlList("sh", "-c", "echo boom >&2; exit 7"))
	dir := testDir(t)
	a := newNode(t, dir, "a", "")
	b := newNode(t, dir, "b", profiles)
	if r := b.kith("daemon", "--check"); r.code != 0 || r.stdout != "config ok\n" {
		t.Fatalf("b's config with exec profiles should pass the check; %v", r)
	}
	a.start()
	b.start()
	a.kith("peers", "add", b.addr("/quic-v1")).mustSucceed(t)
	// Exec profiles are for verified peers; adding a by name makes it one.
	b.kith("peers", "add", a.addr("/quic-v1")).mustSucceed(t)

	r := a.kith("delegate", "--profile", "upper", "--peer", b.id, "--budget", "100", "shout this")
	r.mustSucceed(t)
	if r.stdout != "SHOUT THIS\n" {
		t.Errorf("delegate to upper: stdout %q, want %q", r.stdout, "SHOUT THIS\n")
	}
	mustVerify(t, a, delegationID(t, r), b, "completed")

	r = a.kith("delegate", "--profile", "boom", "--peer", b.id, "--budget", "100", "anything")
	if r.code == 0 {
		t.Fatalf("delegate to a command that exits 7 succeeded; %v", r)
	}
	id := delegationID(t, r)
	// The requester learns that the executor failed, not how: the exit
	// status and stderr of b's command stay on b, in its own record.
	d := showJSON(t, a, id)
	if d.State.String() != "failed" || !strings.HasPrefix(d.Reason, "executor_failed") || strings.Contains(d.Reason, "boom") || strings.Contains(d.Reason, "exit status") {
		t.Errorf("failed command on a: state %s, reason %q; want failed executor_failed without b's stderr or exit status", d.State, d.Reason)
	}
	if pd := showJSON(t, b, id); pd.State.String() != "failed" || !strings.Contains(pd.Reason, "exit status 7") || !strings.Contains(pd.Reason, "boom") {
		t.Errorf("failed command on b: state %s, reason %q; want failed with \"exit status 7\" and the stderr \"boom\"", pd.State, pd.Reason)
	}
	// A failure is signed like a success.
	mustVerify(t, a, id, b, "failed")
}

// chatRequest is what the fake OpenAI server reads of a request.
type chatRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens     uint64 `json:"max_tokens"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// TestE2EOpenAI: the openai executor streams a completion from an
// OpenAI-compatible server (a fake one in this process, on loopback),
// passes the budget as max_tokens and reports the server's usage.
func TestE2EOpenAI(t *testing.T) {
	tokens := []string{"Hello", ",", " mesh", "!"}
	const promptTokens, completionTokens = 11, 4

	var mu sync.Mutex
	var got []chatRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
			return
		}
		var req chatRequest
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		chunk := func(v any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
			fl.Flush()
		}
		type delta struct {
			Content string `json:"content,omitempty"`
		}
		type choice struct {
			Index        int     `json:"index"`
			Delta        delta   `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		}
		for _, tok := range tokens {
			chunk(map[string]any{"choices": []choice{{Delta: delta{tok}}}})
		}
		stop := "stop"
		chunk(map[string]any{"choices": []choice{{FinishReason: &stop}}})
		chunk(map[string]any{"choices": []choice{}, "usage": map[string]uint64{
			"prompt_tokens": promptTokens, "completion_tokens": completionTokens, "total_tokens": promptTokens + completionTokens,
		}})
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close) // registered first, so it closes after the daemons are gone

	a, b := pairNamed(t, fmt.Sprintf(`[[profiles]]
name = "llm"
executor = "openai"
url = %q
model = "test"
`, srv.URL+"/v1"))

	r := a.kith("delegate", "--profile", "llm", "--peer", b.id, "--budget", "64", "say hello")
	r.mustSucceed(t)
	want := strings.Join(tokens, "")
	if r.stdout != want+"\n" {
		t.Errorf("delegate stdout %q, want %q", r.stdout, want+"\n")
	}

	mu.Lock()
	reqs := slices.Clone(got)
	mu.Unlock()
	if len(reqs) != 1 {
		t.Fatalf("the server got %d requests, want 1: %+v", len(reqs), reqs)
	}
	req := reqs[0]
	if req.MaxTokens != 64 || req.Model != "test" || !req.Stream || !req.StreamOptions.IncludeUsage {
		t.Errorf("request: max_tokens %d, model %q, stream %v, include_usage %v; want 64, \"test\", true, true",
			req.MaxTokens, req.Model, req.Stream, req.StreamOptions.IncludeUsage)
	}
	if n := len(req.Messages); n == 0 || req.Messages[n-1].Role != "user" || req.Messages[n-1].Content != "say hello" {
		t.Errorf("request messages %+v; want the task as the last user message", req.Messages)
	}

	id := delegationID(t, r)
	d := showJSON(t, a, id)
	wantUsage := api.Usage{Prompt: promptTokens, Completion: completionTokens, Total: promptTokens + completionTokens}
	if d.State.String() != "completed" || d.Output != want || d.Usage != wantUsage {
		t.Errorf("tasks show: state %s, output %q, usage %+v; want completed, %q, %+v", d.State, d.Output, d.Usage, want, wantUsage)
	}
	mustVerify(t, a, id, b, "completed")
}

// TestE2ERequesterKilled: the requester's daemon dies (SIGKILL) while the
// provider runs its task. The provider finishes anyway; the requester,
// restarted on the same home, reattaches and collects the verified result.
// The task is a document of 48 KiB: its offer and its result are in the
// stores' segments, which the killed daemon never synced, and come back
// from its commit log (store/segment.go).
func TestE2ERequesterKilled(t *testing.T) {
	gate := filepath.Join(testDir(t), "gate")
	a, b := pairNamed(t, fmt.Sprintf("[[profiles]]\nname = \"slow\"\nexecutor = \"exec\"\ncommand = %s\nmax_budget_tokens = 65536\n", tomlList(gatedCommand(t, gate)...)))

	c := a.client()
	defer c.Close()
	text := strings.Repeat("survives the requester ", 48<<10/len("survives the requester "))
	id, err := c.Delegate(t.Context(), api.DelegateRequest{Profile: "slow", Peer: b.id, Text: text, Budget: 60000})
	if err != nil {
		t.Fatalf("delegate: %v", err)
	}
	b.waitState(id, "running")

	a.kill()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if d := b.waitTerminal(id); d.State.String() != "completed" {
		t.Fatalf("b: the task ended %s (%s) with its requester gone; want completed", d.State, d.Reason)
	}

	a.start()
	d := a.waitTerminal(id)
	if d.State.String() != "completed" || d.Output != text {
		t.Fatalf("a after restart: state %s (%s), output of %d bytes; want completed, the %d bytes sent", d.State, d.Reason, len(d.Output), len(text))
	}
	for _, n := range []*testNode{a, b} {
		if segs, err := os.ReadDir(filepath.Join(n.home, "data", "segments")); err != nil || len(segs) == 0 {
			t.Errorf("%s: segments %v (%v); want the task's and the result's", n.home, segs, err)
		}
	}
	if d := showJSON(t, a, id); d.State.String() != "completed" || d.Peer != b.id {
		t.Errorf("tasks show after restart: %+v", d)
	}
	mustVerify(t, a, id, b, "completed")
}

// TestE2EProviderKilled: the provider's daemon dies (SIGKILL) mid-run and
// comes back. The requester, still waiting in "kith delegate", learns from
// the restarted provider that the task failed with provider_restarted, long
// before its own timeout.
func TestE2EProviderKilled(t *testing.T) {
	gate := filepath.Join(testDir(t), "gate")
	a, b := pairNamed(t, fmt.Sprintf("[[profiles]]\nname = \"slow\"\nexecutor = \"exec\"\ncommand = %s\n", tomlList(gatedCommand(t, gate)...)))

	bg := a.kithBackground("delegate", "--profile", "slow", "--peer", b.id, "--budget", "100", "--timeout", "60s", "never finishes")
	line := bg.line(t, "the delegation ID", delegationLine.MatchString)
	id := delegationLine.FindStringSubmatch(line)[1]
	b.waitState(id, "running")

	b.restartSamePorts()
	// Let the command the killed daemon left behind end; the restarted
	// provider must not run the task again.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	r := bg.wait(t)
	if r.code == 0 || r.stdout != "" || !strings.Contains(r.stderr, id+" failed (provider_restarted)") {
		t.Errorf("kith delegate across the provider's restart: want exit 1 with %q on stderr; %v", id+" failed (provider_restarted)", r)
	}
	d := a.waitTerminal(id)
	if d.State.String() != "failed" || d.Reason != "provider_restarted" {
		t.Fatalf("a: state %s (%s); want failed (provider_restarted)", d.State, d.Reason)
	}
	if pd := b.delegation(id); pd.State.String() != "failed" || pd.Reason != "provider_restarted" {
		t.Errorf("b after restart: state %s (%s); want failed (provider_restarted)", pd.State, pd.Reason)
	}
	mustVerify(t, a, id, b, "failed")
}

// TestE2EConfigAndDaemonErrors: "daemon --check" reports every problem of
// a bad config at once; commands that need the daemon say when it is not
// running.
func TestE2EConfigAndDaemonErrors(t *testing.T) {
	dir := testDir(t)
	n := newNode(t, dir, "n", "")

	r := n.kith("tasks", "ls")
	if r.code == 0 || !strings.Contains(r.stderr, "daemon is not running") || r.stdout != "" {
		t.Errorf("kith tasks ls with no daemon: want a failure saying the daemon is not running; %v", r)
	}
	// kith id needs only the key: the peer ID, and a word on stderr.
	r = n.kith("id")
	if r.code != 0 || r.stdout != n.id+"\n" || !strings.Contains(r.stderr, "daemon not running") {
		t.Errorf("kith id with no daemon: want the peer ID alone and a note on stderr; %v", r)
	}

	cfg := filepath.Join(n.home, "config.toml")
	bad := "log_levle = \"debug\"\n\n[limits]\ndefault_hop_limit = 99\n"
	if err := os.WriteFile(cfg, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	r = n.kith("daemon", "--check")
	if r.code == 0 || strings.Contains(r.stdout, "config ok") {
		t.Fatalf("daemon --check passed a bad config; %v", r)
	}
	for _, want := range []string{
		cfg + ":1:", // where: file and line
		`log_levle: unknown key; did you mean "log_level"?`, // the unknown key
		"limits.default_hop_limit: 99 is out of range",      // the invalid value
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("daemon --check: stderr lacks %q; %v", want, r)
		}
	}
	// A value of the wrong type hides none of the others.
	bad = "log_level = \"chatty\"\n\n[limits]\ndefault_hop_limit = 99\n\n[[profiles]]\nname = \"gpu\"\nexecutor = \"echo\"\nvram_mib = -5\nmin_trust = 3\n"
	if err := os.WriteFile(cfg, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	r = n.kith("daemon", "--check")
	if r.code == 0 || strings.Contains(r.stdout, "config ok") {
		t.Fatalf("daemon --check passed a bad config; %v", r)
	}
	for _, want := range []string{
		cfg + ":9:12: profiles[0].vram_mib: -5 is negative",
		cfg + `:10:13: profiles[0].min_trust: wrong type: want one of "untrusted", "verified" or "trusted", got a TOML integer`,
		cfg + `:1:13: log_level: "chatty" is not a level; want "debug", "info", "warn" or "error"`,
		cfg + ":4:21: limits.default_hop_limit: 99 is out of range",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("daemon --check: stderr lacks %q; %v", want, r)
		}
	}
	// The check must not have started anything.
	if _, err := os.Stat(n.socket()); err == nil {
		t.Errorf("daemon --check left a socket at %s", n.socket())
	}
}
