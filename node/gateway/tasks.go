package gateway

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// agent is the a2asrv.RequestHandler of one profile's agent (profile ""
// is the node agent, where message metadata names the profile).
type agent struct {
	g       *Gateway
	profile string
}

var _ a2asrv.RequestHandler = (*agent)(nil)

// Metadata keys a client may set on a message (or the request).
const (
	metaBudget  = "budgetTokens" // token budget; default: the profile's maximum
	metaProfile = "profile"      // node agent only: which profile
)

// selectTimeout bounds finding a provider for a message (capability
// queries included).
const selectTimeout = 30 * time.Second

// outputArtifact is the ID of the artifact that carries a task's output.
const outputArtifact a2a.ArtifactID = "output"

// maxEventText is the most text one streamed artifact update carries:
// larger output goes out in several, each appended to the one before, so
// that a client reads the same text in order. a2a-go's client (and so
// kith's own a2a executor) refuses a server-sent event over 10 MB, and a
// delegation's output may be 64 MiB; 4 MiB of text stays under that in
// JSON unless much of it must be escaped.
const maxEventText = 4 << 20

// eventParts groups parts into the parts of successive artifact updates,
// each of at most maxEventText bytes of text, files and data: a text part
// larger than that is cut (at a UTF-8 boundary) into several, and any
// other part goes whole, alone if it is that large. Output within the
// limit is one update, as it is.
func eventParts(parts a2a.ContentParts) []a2a.ContentParts {
	var out []a2a.ContentParts
	var cur a2a.ContentParts
	size := 0
	add := func(p *a2a.Part, n int) {
		if len(cur) > 0 && size+n > maxEventText {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, p)
		size += n
	}
	for _, p := range parts {
		text, isText := p.Content.(a2a.Text)
		if !isText || len(text) <= maxEventText {
			add(p, partSize(p))
			continue
		}
		for s := string(text); s != ""; {
			n := min(len(s), maxEventText)
			for cut := n; cut > n-utf8.UTFMax && cut > 0 && cut < len(s); cut-- {
				if utf8.RuneStart(s[cut]) {
					n = cut
					break
				}
			}
			piece := *p // its media type and metadata, with a piece of its text
			piece.Content = a2a.Text(s[:n])
			add(&piece, n)
			s = s[n:]
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// lean is t as the first event of a stream carries it: without its
// history (the message the client sent) or its output when they are
// larger than an event should be (maxEventText). The output follows in
// artifact updates anyway (finish), and GetTask has both.
func lean(t *a2a.Task) *a2a.Task {
	history, output := 0, 0
	for _, m := range t.History {
		history += partsSize(m.Parts)
	}
	for _, a := range t.Artifacts {
		output += partsSize(a.Parts)
	}
	if history <= maxEventText && output <= maxEventText {
		return t
	}
	c := *t
	if history > maxEventText {
		c.History = nil
	}
	if output > maxEventText {
		c.Artifacts = nil
	}
	return &c
}

// partsSize is about what parts take in an event (partSize).
func partsSize(parts a2a.ContentParts) int {
	n := 0
	for _, p := range parts {
		n += partSize(p)
	}
	return n
}

// partSize is about what a part takes in an event: its text, its bytes,
// or a little for a URL or data.
func partSize(p *a2a.Part) int {
	switch c := p.Content.(type) {
	case a2a.Text:
		return len(c)
	case a2a.Raw:
		return len(c) * 4 / 3 // base64
	default:
		return 1 << 10
	}
}

func (a *agent) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	d, err := a.start(ctx, req)
	if err != nil {
		return nil, err
	}
	if req.Config == nil || !req.Config.ReturnImmediately {
		if d, err = a.waitSettled(ctx, d); err != nil {
			return nil, err
		}
	}
	if d.State == protocol.StateRejected {
		reason, detail := splitReason(d.Reason)
		return nil, rejectionError(taskID(d.ID), reason, detail)
	}
	history := historyLength(req.Config)
	if history == nil && len(d.Offer) > maxEventText {
		// The client's own message, a document of megabytes, goes back
		// only when it asks for history (historyLength); GetTask has it.
		// Sent back unasked, it doubled what the answer carried, and the
		// daemon's memory for it (docs/performance.md).
		none := 0
		history = &none
	}
	return a.task(d, history), nil
}

func (a *agent) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		d, err := a.start(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		if req.Message.TaskID == "" {
			// A task this message began streams its whole life, from its
			// log, however soon it ended: a fast provider's result may be
			// stored with the delegation's record, before Delegate returns.
			d = asCreated(d)
		}
		a.stream(ctx, d, yield)
	}
}

// asCreated is d as it was when it was created: offered, with no events,
// result or outcome yet.
func asCreated(d store.Delegation) store.Delegation {
	return store.Delegation{
		ID: d.ID, Role: d.Role, Peer: d.Peer, Remote: d.Remote, Parent: d.Parent, ContextID: d.ContextID,
		Profile: d.Profile, State: protocol.StateOffered, BudgetTokens: d.BudgetTokens, Offer: d.Offer,
		CreatedAt: d.CreatedAt, UpdatedAt: d.CreatedAt, Deadline: d.Deadline,
	}
}

func (a *agent) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		d, err := a.lookup(req.ID)
		if err != nil {
			yield(nil, err)
			return
		}
		if d.State.Terminal() {
			yield(nil, a2a.NewError(a2a.ErrUnsupportedOperation, "task "+string(req.ID)+" is "+d.State.String()+"; there is nothing to subscribe to"))
			return
		}
		a.stream(ctx, d, yield)
	}
}

func (a *agent) GetTask(_ context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	d, err := a.lookup(req.ID)
	if err != nil {
		return nil, err
	}
	return a.task(d, req.HistoryLength), nil
}

// Page sizes of ListTasks.
const (
	defaultPageSize = 50
	maxPageSize     = 100
	// maxListScan bounds the delegations one ListTasks call reads.
	maxListScan = 10000
)

func (a *agent) ListTasks(_ context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	size := req.PageSize
	switch {
	case size < 0:
		return nil, a2a.NewError(a2a.ErrInvalidParams, "pageSize: negative")
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		size = maxPageSize
	}
	role := store.RoleRequester
	// The scan reads records; only the page's tasks are read whole, and
	// only when the client wants their history or output.
	ds, err := a.g.cfg.Store.ListDelegations(store.DelegationFilter{Role: &role, Limit: maxListScan, Listing: true})
	if err != nil {
		return nil, a2a.NewError(a2a.ErrInternalError, err.Error())
	}
	slices.Reverse(ds) // newest first
	var match []store.Delegation
	for _, d := range ds {
		if (a.profile != "" && d.Profile != a.profile) ||
			(req.ContextID != "" && string(d.ContextID) != req.ContextID) ||
			(req.Status != a2a.TaskStateUnspecified && taskState(d.State) != req.Status) ||
			(req.StatusTimestampAfter != nil && !d.UpdatedAt.After(*req.StatusTimestampAfter)) {
			continue
		}
		match = append(match, d)
	}
	start := 0
	if req.PageToken != "" {
		id, err := protocol.ParseDelegationID(req.PageToken)
		if err != nil {
			return nil, a2a.NewError(a2a.ErrInvalidParams, "pageToken: not a token this agent issued")
		}
		i := slices.IndexFunc(match, func(d store.Delegation) bool { return d.ID == id })
		if i < 0 {
			return nil, a2a.NewError(a2a.ErrInvalidParams, "pageToken: not a token this agent issued")
		}
		start = i + 1
	}
	end := min(start+size, len(match))
	resp := &a2a.ListTasksResponse{Tasks: []*a2a.Task{}, TotalSize: len(match), PageSize: size}
	history := req.HistoryLength == nil || *req.HistoryLength > 0
	for _, d := range match[start:end] {
		if history || req.IncludeArtifacts {
			whole, err := a.g.cfg.Store.GetDelegation(d.Role, d.ID)
			if err != nil {
				return nil, a2a.NewError(a2a.ErrInternalError, err.Error())
			}
			d = whole
		}
		t := a.task(d, req.HistoryLength)
		if !req.IncludeArtifacts {
			t.Artifacts = nil
		}
		resp.Tasks = append(resp.Tasks, t)
	}
	if end < len(match) {
		resp.NextPageToken = match[end-1].ID.String()
	}
	return resp, nil
}

func (a *agent) CancelTask(_ context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	d, err := a.lookup(req.ID)
	if err != nil {
		return nil, err
	}
	if err := a.g.cfg.Engine.Cancel(d.ID, "canceled by an A2A client"); err != nil {
		switch {
		case errors.Is(err, store.ErrTerminal):
			return nil, a2a.NewError(a2a.ErrTaskNotCancelable, fmt.Sprintf("task %s is already %s", req.ID, taskState(d.State)))
		case errors.Is(err, delegation.ErrUnknown):
			return nil, a2a.ErrTaskNotFound
		}
		return nil, a2a.NewError(a2a.ErrInternalError, err.Error())
	}
	if d, err = a.lookup(req.ID); err != nil {
		return nil, err
	}
	return a.task(d, nil), nil
}

func (a *agent) GetTaskPushConfig(context.Context, *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (a *agent) ListTaskPushConfigs(context.Context, *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (a *agent) CreateTaskPushConfig(context.Context, *a2a.PushConfig) (*a2a.PushConfig, error) {
	return nil, a2a.ErrPushNotificationNotSupported
}

func (a *agent) DeleteTaskPushConfig(context.Context, *a2a.DeleteTaskPushConfigRequest) error {
	return a2a.ErrPushNotificationNotSupported
}

func (a *agent) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return nil, a2a.ErrExtendedCardNotConfigured
}

func taskID(id protocol.DelegationID) a2a.TaskID { return a2a.TaskID(id.String()) }

// lookup finds the delegation behind a task ID. A task of another profile
// is not found through this profile's agent.
func (a *agent) lookup(id a2a.TaskID) (store.Delegation, error) {
	did, err := protocol.ParseDelegationID(string(id))
	if err != nil {
		return store.Delegation{}, a2a.NewError(a2a.ErrTaskNotFound, "task "+quote(string(id))+" not found")
	}
	d, err := a.g.cfg.Store.GetDelegation(store.RoleRequester, did)
	if errors.Is(err, store.ErrNotFound) || (err == nil && a.profile != "" && d.Profile != a.profile) {
		return store.Delegation{}, a2a.NewError(a2a.ErrTaskNotFound, "task "+quote(string(id))+" not found")
	}
	if err != nil {
		return store.Delegation{}, a2a.NewError(a2a.ErrInternalError, err.Error())
	}
	return d, nil
}

// start checks a message and starts its delegation.
func (a *agent) start(ctx context.Context, req *a2a.SendMessageRequest) (store.Delegation, error) {
	m := req.Message
	switch {
	case m == nil:
		return store.Delegation{}, a2a.NewError(a2a.ErrInvalidParams, "message: required")
	case m.Role != a2a.MessageRoleUser:
		return store.Delegation{}, a2a.NewError(a2a.ErrInvalidParams, "message.role: want user")
	case m.TaskID != "":
		return a.answer(ctx, m)
	case len(m.ContextID) > protocol.MaxContextIDLen:
		return store.Delegation{}, a2a.NewError(a2a.ErrInvalidParams, fmt.Sprintf("message.contextId: %d bytes; at most %d", len(m.ContextID), protocol.MaxContextIDLen))
	}
	parts, err := partsFromA2A(m.Parts)
	if err != nil {
		return store.Delegation{}, a2a.NewError(a2a.ErrInvalidParams, err.Error())
	}
	profile := a.profile
	if profile == "" {
		if profile, err = a.nodeProfile(req); err != nil {
			return store.Delegation{}, err
		}
	}
	budget, err := budgetFrom(m.Metadata, "message.metadata")
	if err == nil && budget == 0 {
		budget, err = budgetFrom(req.Metadata, "metadata")
	}
	if err != nil {
		return store.Delegation{}, a2a.NewError(a2a.ErrInvalidParams, err.Error())
	}
	ctxID := m.ContextID
	if ctxID == "" {
		ctxID = a2a.NewContextID()
	}
	// ctx bounds only the choice of a provider: the delegation itself runs
	// on the engine, so a client that disconnects does not cancel it
	// (CancelTask does).
	selectCtx, cancel := context.WithTimeout(ctx, selectTimeout)
	defer cancel()
	id, err := a.g.cfg.Engine.Delegate(selectCtx, delegation.Request{
		Profile: profile, Task: protocol.Task{Role: "user", Parts: parts},
		ContextID: protocol.ContextID(ctxID), BudgetTokens: budget,
	})
	if err != nil {
		return store.Delegation{}, engineError(err)
	}
	d, err := a.g.cfg.Store.GetDelegation(store.RoleRequester, id)
	if err != nil {
		return store.Delegation{}, a2a.NewError(a2a.ErrInternalError, err.Error())
	}
	return d, nil
}

// answer takes a message that names a task: the answer to the question of
// a task in INPUT_REQUIRED, which continues on the same provider. Any other
// task takes no message.
func (a *agent) answer(ctx context.Context, m *a2a.Message) (store.Delegation, error) {
	d, err := a.lookup(m.TaskID)
	if err != nil {
		return store.Delegation{}, err
	}
	if m.ContextID != "" && m.ContextID != string(d.ContextID) {
		return store.Delegation{}, a2a.NewError(a2a.ErrInvalidParams, "message.contextId: task "+string(m.TaskID)+" is in another context")
	}
	if d.State != protocol.StateInputRequired {
		return store.Delegation{}, a2a.NewError(a2a.ErrUnsupportedOperation,
			fmt.Sprintf("message.taskId: task %s is %s and waits for no input; send a new message without taskId (contextId groups a conversation)", m.TaskID, taskState(d.State)))
	}
	parts, err := partsFromA2A(m.Parts)
	if err != nil {
		return store.Delegation{}, a2a.NewError(a2a.ErrInvalidParams, err.Error())
	}
	if err := a.g.cfg.Engine.Reply(ctx, d.ID, protocol.Task{Role: "user", Parts: parts}); err != nil {
		switch {
		case errors.Is(err, delegation.ErrUnknown):
			return store.Delegation{}, a2a.ErrTaskNotFound
		case errors.Is(err, delegation.ErrNotWaiting), errors.Is(err, delegation.ErrDeadlinePassed), errors.Is(err, delegation.ErrBudgetSpent):
			return store.Delegation{}, a2a.NewError(a2a.ErrUnsupportedOperation, "message.taskId: "+err.Error())
		case errors.Is(err, delegation.ErrBadRequest), errors.Is(err, delegation.ErrTooLarge):
			return store.Delegation{}, a2a.NewError(a2a.ErrInvalidParams, err.Error())
		}
		return store.Delegation{}, a2a.NewError(a2a.ErrInternalError, err.Error())
	}
	d, err = a.g.cfg.Store.GetDelegation(store.RoleRequester, d.ID)
	if err != nil {
		return store.Delegation{}, a2a.NewError(a2a.ErrInternalError, err.Error())
	}
	return d, nil
}

func (a *agent) nodeProfile(req *a2a.SendMessageRequest) (string, error) {
	for _, md := range []map[string]any{req.Message.Metadata, req.Metadata} {
		if v, ok := md[metaProfile]; ok {
			s, ok := v.(string)
			if !ok || protocol.CheckProfileName(s) != nil {
				return "", a2a.NewError(a2a.ErrInvalidParams, "metadata.profile: want a profile name")
			}
			return s, nil
		}
	}
	ps := a.g.profiles()
	if len(ps) == 1 {
		return ps[0].Name, nil
	}
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return "", a2a.NewError(a2a.ErrInvalidParams, "metadata.profile: required on the node agent; one of "+strings.Join(names, ", ")+
		" (or send to /a2a/<profile>)")
}

// budgetFrom reads the token budget from metadata: a positive whole number.
func budgetFrom(md map[string]any, path string) (uint64, error) {
	v, ok := md[metaBudget]
	if !ok {
		return 0, nil
	}
	f, ok := v.(float64)
	if !ok || f < 1 || f != math.Trunc(f) || f > 1<<53 {
		return 0, fmt.Errorf("%s.%s: want a positive whole number of tokens", path, metaBudget)
	}
	return uint64(f), nil
}

func historyLength(c *a2a.SendMessageConfig) *int {
	if c == nil {
		return nil
	}
	return c.HistoryLength
}

// task renders a delegation as an A2A task.
func (a *agent) task(d store.Delegation, history *int) *a2a.Task {
	t := &a2a.Task{
		ID: taskID(d.ID), ContextID: string(d.ContextID),
		Status: a.status(d),
	}
	if history == nil || *history > 0 {
		if m := offerMessage(d); m != nil {
			t.History = []*a2a.Message{m}
		}
	}
	if d.State == protocol.StateCompleted {
		if r, err := delegation.Result(d); err == nil {
			t.Artifacts = []*a2a.Artifact{{ID: outputArtifact, Name: "output", Parts: partsToA2A(r.Output)}}
		}
	}
	meta := map[string]any{"profile": d.Profile, "budgetTokens": d.BudgetTokens}
	if d.Peer != "" {
		meta["peer"] = d.Peer.String()
	}
	if d.Usage.Total > 0 {
		meta["usage"] = map[string]any{"prompt": d.Usage.Prompt, "completion": d.Usage.Completion, "total": d.Usage.Total}
	}
	if reason, _ := splitReason(d.Reason); reason != "" {
		meta["reason"] = reason
	}
	t.Metadata = map[string]any{"kith": meta}
	return t
}

func (a *agent) status(d store.Delegation) a2a.TaskStatus {
	ts := d.UpdatedAt
	st := a2a.TaskStatus{State: taskState(d.State), Timestamp: &ts}
	if d.Reason != "" && d.State.Terminal() {
		st.Message = &a2a.Message{
			ID: d.ID.String() + "-status", Role: a2a.MessageRoleAgent, TaskID: taskID(d.ID),
			ContextID: string(d.ContextID), Parts: a2a.ContentParts{a2a.NewTextPart(d.Reason)},
		}
	}
	if d.State == protocol.StateInputRequired {
		// The agent's question, as A2A puts it: the status message.
		if q, err := a.g.cfg.Engine.Question(d.ID); err == nil {
			parts := partsToA2A(q.Parts)
			if len(parts) == 0 {
				parts = a2a.ContentParts{a2a.NewTextPart("")}
			}
			st.Message = &a2a.Message{
				ID: fmt.Sprintf("%s-question-%d", d.ID, q.Turn), Role: a2a.MessageRoleAgent, TaskID: taskID(d.ID),
				ContextID: string(d.ContextID), Parts: parts,
			}
		}
	}
	return st
}

// offerMessage is the task's first message, read back from the offer.
func offerMessage(d store.Delegation) *a2a.Message {
	m, err := protocol.DecodeMessage(d.Offer)
	if err != nil {
		return nil
	}
	o, ok := m.(*protocol.DelegationOffer)
	if !ok {
		return nil
	}
	return &a2a.Message{
		ID: d.ID.String() + "-0", Role: a2a.MessageRoleUser, TaskID: taskID(d.ID),
		ContextID: string(d.ContextID), Parts: partsToA2A(o.Task.Parts),
	}
}

// settled: terminal, or waiting for input; a blocking SendMessage returns.
func settled(s protocol.State) bool { return s.Terminal() || s == protocol.StateInputRequired }

// waitSettled blocks until the delegation settles or ctx ends.
func (a *agent) waitSettled(ctx context.Context, d store.Delegation) (store.Delegation, error) {
	if settled(d.State) {
		return d, nil
	}
	// From the delegation as read: an answered task's earlier question is
	// behind it.
	var out store.Delegation
	err := a.follow(ctx, d, d.LastSeq, func(ev store.Event) bool { return !settled(ev.State) })
	if err != nil && ctx.Err() != nil {
		return d, a2a.NewError(a2a.ErrInternalError, "the client went away before the task finished: "+ctx.Err().Error())
	}
	out, gerr := a.g.cfg.Store.GetDelegation(store.RoleRequester, d.ID)
	if gerr != nil {
		return d, a2a.NewError(a2a.ErrInternalError, gerr.Error())
	}
	return out, nil
}

// follow calls fn with the delegation's events after seq after, first from
// the log and then live, until fn returns false, the delegation settles
// (after fn saw that event) or ctx ends.
func (a *agent) follow(ctx context.Context, d store.Delegation, after uint64, fn func(store.Event) bool) error {
	ch, unsubscribe := a.g.cfg.Engine.Subscribe(store.RoleRequester, d.ID)
	defer unsubscribe()
	last := after
	done := false
	deliver := func(ev store.Event) {
		if done || ev.Seq <= last {
			return
		}
		last = ev.Seq
		if !fn(ev) || settled(ev.State) {
			done = true
		}
	}
	catchUp := func() error {
		evs, err := a.g.cfg.Store.Events(store.RoleRequester, d.ID, last)
		for _, ev := range evs {
			deliver(ev)
		}
		return err
	}
	if err := catchUp(); err != nil {
		return err
	}
	// Keep-alive re-reads cover a subscriber that fell behind and the
	// (unlikely) event published before Subscribe but after the read.
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for !done {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-ch:
			if ev.Seq > last+1 {
				if err := catchUp(); err != nil {
					return err
				}
				continue
			}
			deliver(ev)
		case <-tick.C:
			if err := catchUp(); err != nil {
				return err
			}
		}
	}
	return nil
}

// stream yields the task, then its updates as A2A events: working when it
// runs, each piece of partial output as an artifact chunk, the whole
// output as the last chunk, and the final status.
func (a *agent) stream(ctx context.Context, d store.Delegation, yield func(a2a.Event, error) bool) {
	t := a.task(d, nil)
	if !yield(lean(t), nil) {
		return
	}
	if settled(d.State) {
		a.finish(d, t, yield)
		return
	}
	lastState := t.Status.State
	chunks := 0
	stopped := false
	err := a.follow(ctx, d, d.LastSeq, func(ev store.Event) bool {
		if ev.Type == delegation.EventStatus {
			if m, err := protocol.DecodeMessage(ev.Data); err == nil {
				// A question is the status message (finish), not output.
				if st, ok := m.(*protocol.DelegationStatus); ok && len(st.Partial) > 0 && st.State != protocol.StateInputRequired {
					for _, parts := range eventParts(partsToA2A(st.Partial)) {
						e := a2a.NewArtifactUpdateEvent(t, outputArtifact, parts...)
						e.Append = chunks > 0
						chunks++
						if !yield(e, nil) {
							stopped = true
							return false
						}
					}
				}
			}
		}
		if s := taskState(ev.State); s != lastState && !settled(ev.State) {
			lastState = s
			if !yield(a2a.NewStatusUpdateEvent(t, s, nil), nil) {
				stopped = true
				return false
			}
		}
		return true
	})
	if stopped {
		return
	}
	if err != nil {
		yield(nil, a2a.NewError(a2a.ErrInternalError, err.Error()))
		return
	}
	final, err := a.g.cfg.Store.GetDelegation(store.RoleRequester, d.ID)
	if err != nil {
		yield(nil, a2a.NewError(a2a.ErrInternalError, err.Error()))
		return
	}
	a.finish(final, a.task(final, nil), yield)
}

// finish yields the whole output (when there is one) and the final status.
func (a *agent) finish(d store.Delegation, t *a2a.Task, yield func(a2a.Event, error) bool) {
	if len(t.Artifacts) > 0 {
		// The whole output replaces the chunks: its first event does not
		// append, and the last says it is the last.
		pieces := eventParts(t.Artifacts[0].Parts)
		for i, parts := range pieces {
			e := a2a.NewArtifactUpdateEvent(t, outputArtifact, parts...)
			if i == 0 {
				e.Artifact.Name = t.Artifacts[0].Name
			}
			e.Append, e.LastChunk = i > 0, i == len(pieces)-1
			if !yield(e, nil) {
				return
			}
		}
	}
	e := a2a.NewStatusUpdateEvent(t, t.Status.State, t.Status.Message)
	e.Status.Timestamp = t.Status.Timestamp
	if d.State == protocol.StateRejected {
		reason, _ := splitReason(d.Reason)
		e.Metadata = map[string]any{"kith": map[string]any{"reason": reason}}
	}
	yield(e, nil)
}
