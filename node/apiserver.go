package node

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// maxAPIBody caps a request body on the control API.
const maxAPIBody = 1 << 20

// apiRoute is one route of the REST API; the same table builds the mux
// and the OpenAPI document (openapi.go), so the two cannot drift apart.
type apiRoute struct {
	method, path, summary string
	handle                func(*Node, http.ResponseWriter, *http.Request)
	request, response     any  // zero values of the JSON bodies; nil: none
	stream                bool // the response is server-sent events of response
}

var apiRoutes = []apiRoute{
	{"GET", "/node", "This node: peer ID, addresses, profiles, version", (*Node).handleNode, nil, api.NodeInfo{}, false},
	{"GET", "/peers", "Known peers with trust and access", (*Node).handlePeers, nil, []api.Peer{}, false},
	{"POST", "/peers", "Add a static peer by full multiaddr and connect", (*Node).handleAddPeer, api.AddPeer{}, api.Peer{}, false},
	{"GET", "/peers/log", "The audit log of trust and access changes", (*Node).handleAudit, nil, []api.AuditEntry{}, false},
	{"POST", "/peers/{id}", "Change a peer's trust or access", (*Node).handlePeerChange, api.PeerChange{}, api.Peer{}, false},
	{"DELETE", "/peers/{id}", "Forget a peer", (*Node).handlePeerChange, nil, api.Peer{}, false},
	{"GET", "/profiles", "The profiles this node serves", (*Node).handleProfiles, nil, []api.Profile{}, false},
	{"POST", "/delegations", "Start a delegation", (*Node).handleDelegate, api.DelegateRequest{}, api.DelegateResponse{}, false},
	{"GET", "/delegations", "Delegations, oldest first: the newest ?limit= (default 1000), ?since= (RFC 3339), ?state= (repeatable); header Kith-Truncated: true when older matches were left out", (*Node).handleList, nil, []api.Delegation{}, false},
	{"GET", "/delegations/{id}", "One delegation", (*Node).handleGet, nil, api.Delegation{}, false},
	{"GET", "/delegations/{id}/events", "A delegation's event log, then live events until it is terminal", (*Node).handleEvents, nil, api.Event{}, true},
	{"POST", "/delegations/{id}/cancel", "Cancel a delegation this node requested", (*Node).handleCancel, nil, struct{}{}, false},
	{"POST", "/delegations/{id}/reply", "Answer the question of a delegation this node requested that waits for input (state input_required); 409 when it does not wait, its deadline passed or its budget is spent", (*Node).handleReply, api.Reply{}, api.Delegation{}, false},
	{"GET", "/delegations/{id}/verify", "Re-check a delegation's signed result proof", (*Node).handleVerify, nil, api.Proof{}, false},
	{"GET", "/events", "Every delegation event on this node, live", (*Node).handleAllEvents, nil, api.DelegationEvent{}, true},
	{"GET", "/tree", "Delegations as a tree of parents and children", (*Node).handleTree, nil, []api.TreeNode{}, false},
	{"GET", "/gpu", "VRAM inventory and leases", (*Node).handleGPU, nil, api.GPU{}, false},
	{"GET", "/status", "NAT, reachability, relays and connections", (*Node).handleStatus, nil, api.Status{}, false},
	{"GET", "/discovery", "Known peers with their sources and verified profiles (?profile= to search)", (*Node).handleDiscovery, nil, api.Discovery{}, false},
	// WorkPlans (plans.go)
	{"POST", "/plans", "Check a plan file (check_only) or check and start it", (*Node).handlePlanRun, api.PlanRun{}, api.Plan{}, false},
	{"GET", "/plans", "The plans this node coordinates, newest first", (*Node).handlePlans, nil, []api.Plan{}, false},
	{"GET", "/plans/{id}", "One plan: its steps in dependency order, where each attempt ran, and its ledger", (*Node).handlePlan, nil, api.Plan{}, false},
	{"POST", "/plans/{id}/cancel", "Cancel a running plan", (*Node).handlePlanCancel, api.PlanCancel{}, struct{}{}, false},
	{"GET", "/plans/{id}/decisions", "A plan's decisions ledger, oldest entry first", (*Node).handleDecisions, nil, []api.LedgerEntry{}, false},
	{"POST", "/plans/{id}/decisions/merge", "Merge a pending proposal (ref: entry number or slug)", (*Node).handleDecision, api.LedgerAction{}, api.LedgerEntry{}, false},
	{"POST", "/plans/{id}/decisions/reject", "Reject a pending proposal, with a reason (why)", (*Node).handleDecision, api.LedgerAction{}, api.LedgerEntry{}, false},
}

func (n *Node) apiHandler() http.Handler {
	mux := http.NewServeMux()
	for _, r := range apiRoutes {
		mux.HandleFunc(r.method+" "+api.Prefix+r.path, func(w http.ResponseWriter, req *http.Request) { r.handle(n, w, req) })
	}
	return mux
}

// socketHandler is the unix socket's API: the REST API and the routes
// only the node's own user may call (the HTTP listener's token).
func (n *Node) socketHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(api.Prefix+"/", n.apiHandler())
	mux.HandleFunc("GET "+api.Prefix+"/api-token", n.handleToken)
	mux.HandleFunc("POST "+api.Prefix+"/api-token", n.handleToken)
	mux.HandleFunc("POST "+api.Prefix+"/reload", n.handleReload)
	mux.HandleFunc("GET "+OpenAPIPath, serveOpenAPI)
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, api.Error{Error: err.Error()})
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeBodyMax(w, r, v, maxAPIBody)
}

func decodeBodyMax(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
		return false
	}
	return true
}

func (n *Node) handleNode(w http.ResponseWriter, _ *http.Request) {
	info := api.NodeInfo{PeerID: n.PeerID().String(), Addrs: n.Addrs(), Version: Version, HTTPAddr: n.HTTPAddr()}
	for _, p := range n.Engine().Profiles() {
		info.Profiles = append(info.Profiles, p.Name)
	}
	writeJSON(w, http.StatusOK, info)
}

func (n *Node) handlePeers(w http.ResponseWriter, _ *http.Request) {
	peers, err := n.Store().ListPeers()
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	h := n.Host()
	out := []api.Peer{}
	for _, p := range peers {
		out = append(out, api.Peer{
			ID: p.ID.String(), Addrs: p.Addrs, Sources: p.Sources, Trust: p.Trust,
			Access: p.Access, LastSeen: p.LastSeen,
			Connected: h.Network().Connectedness(p.ID) == network.Connected,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (n *Node) handleAddPeer(w http.ResponseWriter, r *http.Request) {
	var req api.AddPeer
	if !decodeBody(w, r, &req) {
		return
	}
	ai, err := AddPeerToStore(n.Store(), req.Addr, "static")
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	origin := req.Origin
	if origin == "" {
		origin = "api"
	}
	if _, err := n.Store().RaiseTrust(ai.ID, NamedPeerTrust, origin); err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	n.connectNow(ai)
	p, err := n.Store().GetPeer(ai.ID)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Peer{
		ID: p.ID.String(), Addrs: p.Addrs, Sources: p.Sources, Trust: p.Trust, Access: p.Access,
		Connected: n.Host().Network().Connectedness(p.ID) == network.Connected, LastSeen: p.LastSeen,
	})
}

func (n *Node) handleProfiles(w http.ResponseWriter, _ *http.Request) {
	out := []api.Profile{}
	for _, p := range n.Engine().Profiles() {
		out = append(out, api.Profile{
			Name: p.Name, Description: p.Description, Skills: append([]string{}, p.Skills...),
			MaxBudgetTokens: p.MaxBudgetTokens, VRAMMiB: p.VRAMMiB,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (n *Node) handleDelegate(w http.ResponseWriter, r *http.Request) {
	var req api.DelegateRequest
	if !decodeBodyMax(w, r, &req, api.MaxDelegateBody) {
		return
	}
	dr := delegation.Request{
		Profile: req.Profile, BudgetTokens: req.Budget, ContextID: protocol.ContextID(req.ContextID),
		Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart(req.Text)}},
	}
	if req.Peer != "" {
		p, err := peer.Decode(req.Peer)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("peer %q: %w", req.Peer, err))
			return
		}
		if err := n.reachable(p); err != nil {
			writeErr(w, http.StatusForbidden, err)
			return
		}
		dr.Peer = p
	}
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("timeout %q: want a positive duration like 30s", req.Timeout))
			return
		}
		dr.Timeout = d
	}
	if req.Parent != "" {
		id, err := protocol.ParseDelegationID(req.Parent)
		if err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
		dr.Parent = id
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	id, err := n.Engine().Delegate(ctx, dr)
	if err != nil {
		code := http.StatusBadGateway
		switch {
		case errors.Is(err, delegation.ErrBadRequest):
			code = http.StatusBadRequest
		case errors.Is(err, delegation.ErrTooLarge):
			code = http.StatusRequestEntityTooLarge
		}
		writeErr(w, code, err)
		return
	}
	writeJSON(w, http.StatusOK, api.DelegateResponse{ID: id.String()})
}

func (n *Node) lookup(w http.ResponseWriter, r *http.Request) (store.Delegation, bool) {
	id, err := protocol.ParseDelegationID(r.PathValue("id"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return store.Delegation{}, false
	}
	d, err := n.Store().GetDelegation(store.RoleRequester, id)
	if errors.Is(err, store.ErrNotFound) {
		d, err = n.Store().GetDelegation(store.RoleProvider, id)
	}
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, store.ErrNotFound) {
			code = http.StatusNotFound
		}
		writeErr(w, code, fmt.Errorf("delegation %s: %w", id, err))
		return d, false
	}
	return d, true
}

func toAPI(d store.Delegation) api.Delegation {
	out := api.Delegation{
		ID: d.ID.String(), Role: d.Role, Profile: d.Profile, State: d.State, Reason: d.Reason,
		Remote: d.Remote, ContextID: string(d.ContextID), Budget: d.BudgetTokens,
		Usage:  api.Usage{Prompt: d.Usage.Prompt, Completion: d.Usage.Completion, Total: d.Usage.Total},
		Output: delegation.Output(d), OutputOmitted: d.ResultLeftOut,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, Terminal: d.State.Terminal(),
	}
	if d.Peer != "" {
		out.Peer = d.Peer.String()
	}
	if !d.Parent.IsZero() {
		out.Parent = d.Parent.String()
	}
	return out
}

func (n *Node) handleGet(w http.ResponseWriter, r *http.Request) {
	if d, ok := n.lookup(w, r); ok {
		writeJSON(w, http.StatusOK, n.withQuestion(d))
	}
}

// withQuestion is toAPI with the question a waiting delegation asks.
func (n *Node) withQuestion(d store.Delegation) api.Delegation {
	out := toAPI(d)
	if d.Role == store.RoleRequester && d.State == protocol.StateInputRequired {
		if q, err := n.Engine().Question(d.ID); err == nil {
			out.Question, out.Turn = q.Text, q.Turn
		}
	}
	return out
}

func (n *Node) handleReply(w http.ResponseWriter, r *http.Request) {
	var req api.Reply
	// An answer may be a document too: as large as a task.
	if !decodeBodyMax(w, r, &req, api.MaxDelegateBody) {
		return
	}
	id, err := protocol.ParseDelegationID(r.PathValue("id"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if req.Text == "" {
		writeErr(w, http.StatusBadRequest, errors.New("text: the answer is empty"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	answer := protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart(req.Text)}}
	if err := n.Engine().Reply(ctx, id, answer); err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, delegation.ErrUnknown):
			code = http.StatusNotFound
		case errors.Is(err, delegation.ErrNotWaiting), errors.Is(err, delegation.ErrDeadlinePassed), errors.Is(err, delegation.ErrBudgetSpent):
			code = http.StatusConflict
		case errors.Is(err, delegation.ErrBadRequest):
			code = http.StatusBadRequest
		case errors.Is(err, delegation.ErrTooLarge):
			code = http.StatusRequestEntityTooLarge
		case errors.Is(err, delegation.ErrNotRunning):
			code = http.StatusServiceUnavailable
		}
		writeErr(w, code, err)
		return
	}
	d, err := n.Store().GetDelegation(store.RoleRequester, id)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, n.withQuestion(d))
}

func (n *Node) handleList(w http.ResponseWriter, r *http.Request) {
	q, err := api.ParseListQuery(r.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	// A listing reads records, not the files of large documents.
	f := store.DelegationFilter{Limit: q.Limit + 1, Since: q.Since, Listing: true}
	f.States = q.States
	ds, err := n.Store().ListDelegations(f)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	// One more than the limit was asked for: its presence says that older
	// matches were left out.
	if len(ds) > q.Limit {
		ds = ds[len(ds)-q.Limit:]
		w.Header().Set(api.TruncatedHeader, "true")
	}
	out := []api.Delegation{}
	for _, d := range ds {
		out = append(out, toAPI(d))
	}
	writeJSON(w, http.StatusOK, out)
}

func (n *Node) handleCancel(w http.ResponseWriter, r *http.Request) {
	d, ok := n.lookup(w, r)
	if !ok {
		return
	}
	if err := n.Engine().Cancel(d.ID, "cancelled by user"); err != nil {
		code := http.StatusConflict
		if errors.Is(err, delegation.ErrUnknown) {
			code = http.StatusNotFound
		}
		writeErr(w, code, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (n *Node) handleVerify(w http.ResponseWriter, r *http.Request) {
	d, ok := n.lookup(w, r)
	if !ok {
		return
	}
	p, err := n.Engine().Verify(d.ID)
	out := api.Proof{Valid: err == nil}
	if err != nil {
		out.Error = err.Error()
	}
	if p.Provider != "" {
		out.Provider, out.Requester, out.State = p.Provider.String(), p.Requester.String(), p.State
		out.Usage = api.Usage{Prompt: p.Usage.Prompt, Completion: p.Usage.Completion, Total: p.Usage.Total}
		out.Digest = p.Digest.String()
		out.OfferDigest, out.TranscriptDigest = hex.EncodeToString(p.OfferHash[:]), hex.EncodeToString(p.TranscriptHash[:])
		if p.Digest == protocol.DigestSHA256 {
			out.OfferSHA256, out.Transcript = out.OfferDigest, out.TranscriptDigest
		}
		out.CompletedAt = p.CompletedAt
		out.Turns = p.Turns
	}
	writeJSON(w, http.StatusOK, out)
}

func (n *Node) handleTree(w http.ResponseWriter, _ *http.Request) {
	roots, err := n.Engine().Tree(1000)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	var conv func(*delegation.Node) api.TreeNode
	conv = func(t *delegation.Node) api.TreeNode {
		out := api.TreeNode{Delegation: toAPI(t.Delegation)}
		for _, c := range t.Children {
			out.Children = append(out.Children, conv(c))
		}
		return out
	}
	out := []api.TreeNode{}
	for _, r := range roots {
		out = append(out, conv(r))
	}
	writeJSON(w, http.StatusOK, n.planTree(out))
}

func eventToAPI(ev store.Event) api.Event {
	out := api.Event{Seq: ev.Seq, At: ev.At, Type: ev.Type, State: ev.State, Terminal: ev.State.Terminal()}
	if ev.Type == delegation.EventStatus {
		if m, err := protocol.DecodeMessage(ev.Data); err == nil {
			if st, ok := m.(*protocol.DelegationStatus); ok {
				out.Progress = st.ProgressPermille
				for _, p := range st.Partial {
					out.Partial += p.Text
				}
			}
		}
	}
	return out
}

// handleEvents streams a delegation's event log as server-sent events: the
// log so far, then live events, until the delegation is terminal.
func (n *Node) handleEvents(w http.ResponseWriter, r *http.Request) {
	d, ok := n.lookup(w, r)
	if !ok {
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeErr(w, http.StatusInternalServerError, errors.New("streaming unsupported"))
		return
	}
	ch, unsubscribe := n.Engine().Subscribe(d.Role, d.ID)
	defer unsubscribe()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	var last uint64
	send := func(ev store.Event) bool {
		if ev.Seq <= last {
			return false
		}
		last = ev.Seq
		b, _ := json.Marshal(eventToAPI(ev))
		fmt.Fprintf(w, "id: %d\ndata: %s\n\n", ev.Seq, b)
		fl.Flush()
		return ev.State.Terminal()
	}
	// Catch up from the log, then follow live; re-read the log when a
	// gap shows (a slow subscriber misses events).
	catchUp := func() bool {
		evs, err := n.Store().Events(d.Role, d.ID, last)
		if err != nil {
			return true
		}
		for _, ev := range evs {
			if send(ev) {
				return true
			}
		}
		return false
	}
	if catchUp() {
		return
	}
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-ch:
			if ev.Seq > last+1 {
				if catchUp() {
					return
				}
				continue
			}
			if send(ev) {
				return
			}
		case <-tick.C:
			if catchUp() {
				return
			}
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		}
	}
}
