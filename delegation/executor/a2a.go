package executor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
)

// A2A forwards a task to an A2A agent: the agent's card (read from
// URL/.well-known/agent-card.json, kept for CardTTL) says which protocol
// to speak (v1.0 JSON-RPC or HTTP+JSON, or v0.3 JSON-RPC); the task goes as
// one user message; the agent's artifact chunks come back as updates; a
// cancelled ctx cancels the remote task. Agents that cannot be reached,
// serve a bad card, send malformed events or go quiet for IdleTimeout fail
// with ErrFailed; the delegation's timeout bounds everything else.
type A2A struct {
	URL   string // the agent's base URL
	Token string // bearer token; "" sends none
	// Client makes the HTTP requests; nil is a client without a global
	// timeout (ctx bounds each call; streams may be long).
	Client *http.Client
	// CardTTL is how long a card is used before it is read again; 5m if 0.
	CardTTL time.Duration
	// IdleTimeout fails a task when the agent sends nothing for this long
	// (a stream that never ends); 2m if 0.
	IdleTimeout time.Duration

	mu     sync.Mutex
	card   *a2a.AgentCard
	cardAt time.Time
}

var _ Executor = (*A2A)(nil)

// maxA2ACardBytes bounds an agent card.
const maxA2ACardBytes = 1 << 20

// bearerTransport adds the bearer token to every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func (x *A2A) httpClient() *http.Client {
	hc := x.Client
	if hc == nil {
		hc = &http.Client{}
	}
	if x.Token == "" {
		return hc
	}
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c := *hc
	c.Transport = bearerTransport{x.Token, next}
	return &c
}

// agentCard returns the cached card, reading it again when it is older
// than CardTTL (or when fresh is set, after a failure with the old one).
func (x *A2A) agentCard(ctx context.Context, hc *http.Client) (*a2a.AgentCard, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.card != nil && time.Since(x.cardAt) < orDefault(x.CardTTL, 5*time.Minute) {
		return x.card, nil
	}
	url := strings.TrimSuffix(x.URL, "/") + "/.well-known/agent-card.json"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: a2a: card: %v", ErrFailed, err)
	}
	// Servers that speak both answer a versionless request with a v0.3
	// card; ask for the newest (one that speaks only v0.3 ignores it).
	req.Header.Set("A2A-Version", string(a2a.Version))
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: a2a: agent unreachable: %v", ErrFailed, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: a2a: card: GET %s: %s", ErrFailed, url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxA2ACardBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: a2a: card: %v", ErrFailed, err)
	}
	if len(b) > maxA2ACardBytes {
		return nil, fmt.Errorf("%w: a2a: card over %d bytes", ErrFailed, maxA2ACardBytes)
	}
	card, err := parseCard(b)
	if err != nil {
		return nil, fmt.Errorf("%w: a2a: bad card at %s: %v", ErrFailed, url, err)
	}
	x.card, x.cardAt = card, time.Now()
	return card, nil
}

// parseCard reads a v1.0 card, or a v0.3 one (which has no
// supportedInterfaces but a url and a preferredTransport).
func parseCard(b []byte) (*a2a.AgentCard, error) {
	var card a2a.AgentCard
	if err := json.Unmarshal(b, &card); err != nil {
		return nil, err
	}
	if len(card.SupportedInterfaces) == 0 {
		c, err := a2av0.NewAgentCardParser()(b)
		if err != nil {
			return nil, err
		}
		card = *c
	}
	if len(card.SupportedInterfaces) == 0 {
		return nil, errors.New("no interfaces (supportedInterfaces, or url for v0.3)")
	}
	for i, in := range card.SupportedInterfaces {
		if in == nil || !strings.HasPrefix(in.URL, "http://") && !strings.HasPrefix(in.URL, "https://") {
			return nil, fmt.Errorf("supportedInterfaces[%d]: not an http(s) URL", i)
		}
	}
	return &card, nil
}

// a2aRun is the state of one Execute.
type a2aRun struct {
	task      Task
	emit      func(Update)
	order     []a2a.ArtifactID
	artifacts map[a2a.ArtifactID]string
	taskID    a2a.TaskID
	contextID string
	usage     *Usage // declared by the agent
	final     a2a.TaskState
	finalMsg  string
	atBudget  bool
}

func (r *a2aRun) text() string {
	var b strings.Builder
	for _, id := range r.order {
		b.WriteString(r.artifacts[id])
	}
	return b.String()
}

func partsText(parts a2a.ContentParts) string {
	var b strings.Builder
	for _, p := range parts {
		if p != nil {
			if t, ok := p.Content.(a2a.Text); ok {
				b.WriteString(string(t))
			}
		}
	}
	return b.String()
}

// artifact applies an artifact update and emits the new text, cut at the
// budget.
func (r *a2aRun) artifact(e *a2a.TaskArtifactUpdateEvent) {
	if e.Artifact == nil {
		return
	}
	id := e.Artifact.ID
	add := partsText(e.Artifact.Parts)
	old, seen := r.artifacts[id]
	if !seen {
		r.order = append(r.order, id)
	}
	next := add
	if e.Append {
		next = old + add
	}
	if !strings.HasPrefix(next, old) {
		// A replacement that is not an extension: the pieces already
		// emitted cannot be taken back; the result holds the new text.
		r.artifacts[id] = next
		return
	}
	limit := budgetBytes(r.task.BudgetTokens)
	before := len(r.text())
	r.artifacts[id] = next
	if total := len(r.text()); total > limit {
		r.atBudget = true
		keep := len(next) - (total - limit)
		r.artifacts[id] = truncateUTF8(next, max(keep, 0))
	}
	if delta := r.text(); len(delta) > before {
		r.emit(Update{Text: delta[before:], Progress: -1})
	}
}

// declaredUsage reads a usage report an agent may put in metadata
// ("usage": {"prompt", "completion", "total"}; kith's gateway nests it
// under "kith").
func declaredUsage(md map[string]any) *Usage {
	if k, ok := md["kith"].(map[string]any); ok {
		md = k
	}
	u, ok := md["usage"].(map[string]any)
	if !ok {
		return nil
	}
	num := func(k string) uint64 {
		f, _ := u[k].(float64)
		if f < 0 {
			return 0
		}
		return uint64(f)
	}
	out := Usage{Prompt: num("prompt"), Completion: num("completion"), Total: num("total")}
	if out.Total == 0 {
		out.Total = out.Prompt + out.Completion
	}
	return &out
}

// event applies one event; it reports whether the task is over.
func (r *a2aRun) event(ev a2a.Event) (bool, error) {
	switch e := ev.(type) {
	case *a2a.Message:
		// A direct reply: the message is the whole answer.
		r.artifact(&a2a.TaskArtifactUpdateEvent{Artifact: &a2a.Artifact{ID: "message", Parts: e.Parts}})
		r.final = a2a.TaskStateCompleted
		return true, nil
	case *a2a.Task:
		r.taskID, r.contextID = e.ID, cmp.Or(e.ContextID, r.contextID)
		if u := declaredUsage(e.Metadata); u != nil {
			r.usage = u
		}
		for _, a := range e.Artifacts {
			r.artifact(&a2a.TaskArtifactUpdateEvent{Artifact: a})
		}
		return r.status(e.Status), nil
	case *a2a.TaskArtifactUpdateEvent:
		if r.taskID == "" {
			r.taskID = e.TaskID
		}
		r.artifact(e)
		return false, nil
	case *a2a.TaskStatusUpdateEvent:
		if r.taskID == "" {
			r.taskID = e.TaskID
		}
		r.contextID = cmp.Or(r.contextID, e.ContextID)
		if u := declaredUsage(e.Metadata); u != nil {
			r.usage = u
		}
		return r.status(e.Status), nil
	case nil:
		return false, errors.New("empty event")
	}
	return false, fmt.Errorf("unexpected event %T", ev)
}

func (r *a2aRun) status(s a2a.TaskStatus) bool {
	switch s.State {
	case a2a.TaskStateCompleted, a2a.TaskStateFailed, a2a.TaskStateCanceled, a2a.TaskStateRejected,
		a2a.TaskStateInputRequired, a2a.TaskStateAuthRequired:
		r.final = s.State
		if s.Message != nil {
			r.finalMsg = partsText(s.Message.Parts)
		}
		return true
	}
	return false
}

// Execute sends the task and follows it to the end.
func (x *A2A) Execute(ctx context.Context, task Task, emit func(Update)) (Result, error) {
	run := &a2aRun{task: task, emit: orNop(emit), artifacts: map[a2a.ArtifactID]string{}}
	result := func() Result {
		out := run.text()
		res := Result{Text: out, Usage: estimatedUsage(turnInput(task), out), StoppedAtBudget: run.atBudget}
		if run.usage != nil {
			res.Usage = *run.usage
		}
		return res
	}
	hc := x.httpClient()
	card, err := x.agentCard(ctx, hc)
	if err != nil {
		return Result{}, err
	}
	client, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc),
		a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: hc}))
	if err != nil {
		x.forgetCard()
		return Result{}, fmt.Errorf("%w: a2a: no transport this node speaks in the card: %v", ErrFailed, err)
	}
	defer client.Destroy()

	text, data := task.Text, task.Data
	var resume a2aResume
	if t := lastTurn(task); t != nil {
		// The answer to the agent's question goes to the same task, as
		// A2A continues an input-required task.
		if err := json.Unmarshal(t.Resume, &resume); err != nil || resume.TaskID == "" {
			return Result{}, fmt.Errorf("%w: a2a: the paused task's state is unreadable", ErrFailed)
		}
		text, data = t.Answer, t.AnswerData
		run.taskID, run.contextID = resume.TaskID, resume.ContextID
	}
	parts := a2a.ContentParts{a2a.NewTextPart(text)}
	for _, d := range data {
		var v map[string]any
		if json.Unmarshal(d, &v) == nil {
			parts = append(parts, a2a.NewDataPart(v))
		}
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, parts...)
	msg.ContextID = task.ContextID
	if resume.TaskID != "" {
		msg.TaskID, msg.ContextID = resume.TaskID, resume.ContextID
	}
	req := &a2a.SendMessageRequest{Message: msg}
	if task.BudgetTokens > 0 {
		req.Metadata = map[string]any{"budgetTokens": task.BudgetTokens}
	}
	if len(task.History) > 0 {
		// Contexts: the agent keeps its own state under the context id; the
		// turns it may not have seen (the context moved here) ride along.
		if req.Metadata == nil {
			req.Metadata = map[string]any{}
		}
		req.Metadata["kithContextHistory"] = task.History
	}

	// The watchdog ends the call when the agent goes quiet; every event
	// rearms it.
	callCtx, cancelCall := context.WithCancelCause(ctx)
	defer cancelCall(nil)
	idle := orDefault(x.IdleTimeout, 2*time.Minute)
	errIdle := fmt.Errorf("%w: a2a: the agent sent nothing for %s", ErrFailed, idle)
	watchdog := time.AfterFunc(idle, func() { cancelCall(errIdle) })
	defer watchdog.Stop()

	var events func(yield func(a2a.Event, error) bool)
	if card.Capabilities.Streaming {
		events = client.SendStreamingMessage(callCtx, req)
	} else {
		events = func(yield func(a2a.Event, error) bool) {
			res, err := client.SendMessage(callCtx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			ev, _ := res.(a2a.Event)
			yield(ev, nil)
		}
	}
	done := false
	var streamErr error
	for ev, err := range events {
		watchdog.Reset(idle)
		if err != nil {
			streamErr = err
			break
		}
		over, err := run.event(ev)
		if err != nil {
			streamErr = fmt.Errorf("malformed event: %w", err)
			break
		}
		if run.atBudget {
			x.cancelRemote(client, run.taskID)
			return result(), nil
		}
		if over {
			done = true
			break
		}
	}
	switch {
	case ctx.Err() != nil:
		x.cancelRemote(client, run.taskID)
		return result(), fmt.Errorf("a2a: %w", ctx.Err())
	case context.Cause(callCtx) == errIdle:
		x.cancelRemote(client, run.taskID)
		return result(), errIdle
	case streamErr != nil:
		x.cancelRemote(client, run.taskID)
		return result(), fmt.Errorf("%w: a2a: %s", ErrFailed, oneLine(streamErr.Error()))
	case !done:
		// The stream ended without a final state: ask once.
		if run.taskID == "" {
			return result(), fmt.Errorf("%w: a2a: the agent's stream ended before any task or answer", ErrFailed)
		}
		t, err := client.GetTask(ctx, &a2a.GetTaskRequest{ID: run.taskID})
		if err != nil {
			return result(), fmt.Errorf("%w: a2a: the stream ended early and GetTask failed: %v", ErrFailed, err)
		}
		if _, err := run.event(t); err != nil || run.final == a2a.TaskStateUnspecified {
			x.cancelRemote(client, run.taskID)
			return result(), fmt.Errorf("%w: a2a: the agent's stream ended with the task %s", ErrFailed, t.Status.State)
		}
	}
	res := result()
	switch run.final {
	case a2a.TaskStateCompleted:
		if run.usage != nil && task.BudgetTokens > 0 && run.usage.Completion > task.BudgetTokens {
			return res, fmt.Errorf("%w: a2a: agent reported %d completion tokens, budget %d", ErrBudgetExceeded, run.usage.Completion, task.BudgetTokens)
		}
		return res, nil
	case a2a.TaskStateInputRequired:
		// The agent's question becomes the delegation's: the task pauses,
		// and the answer goes to the same remote task (see above).
		if run.taskID == "" {
			return res, fmt.Errorf("%w: a2a: the agent wants input but named no task to answer", ErrFailed)
		}
		state, err := json.Marshal(a2aResume{TaskID: run.taskID, ContextID: run.contextID})
		if err != nil || len(state) > MaxResume {
			x.cancelRemote(client, run.taskID)
			return res, fmt.Errorf("%w: a2a: the agent's task ID is too long to keep", ErrFailed)
		}
		res.Input = &InputRequest{Question: truncateUTF8(run.finalMsg, MaxQuestion), Resume: state}
		return res, nil
	case a2a.TaskStateAuthRequired:
		x.cancelRemote(client, run.taskID)
		return res, fmt.Errorf("%w: a2a: the agent wants more (%s), which a delegation cannot give: %s", ErrFailed, run.final, oneLine(run.finalMsg))
	}
	return res, fmt.Errorf("%w: a2a: the agent's task ended %s: %s", ErrFailed, run.final, oneLine(run.finalMsg))
}

// a2aResume is what an A2A executor keeps while its agent waits for input:
// the remote task and context the answer goes to.
type a2aResume struct {
	TaskID    a2a.TaskID `json:"task_id"`
	ContextID string     `json:"context_id,omitempty"`
}

func (x *A2A) forgetCard() {
	x.mu.Lock()
	x.card = nil
	x.mu.Unlock()
}

// cancelRemote asks the agent to cancel, best effort and bounded, with a
// context of its own: the task's may already be done.
func (x *A2A) cancelRemote(client *a2aclient.Client, id a2a.TaskID) {
	if id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = client.CancelTask(ctx, &a2a.CancelTaskRequest{ID: id})
}
