package delegation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Contexts (docs/contexts.md). A context id groups a requester's
// delegations into one conversation. Its state lives on both sides:
//
//   - the requester's store lists the context's delegations (store.Context);
//   - a provider keeps, per (requester, context id), the turns it served
//     (store.PeerContext), and hands them to the executor of the next one.
//
// A provider "holds a context's state" for a requester when it ran the
// context's newest completed delegation for that requester, no longer
// ago than the store's context TTL: its kept turns then end with the
// newest one. A new delegation in the context prefers the provider that ran
// the context's newest completed delegation of the same profile (affinity),
// if it still offers the profile to this node with a free slot and room for
// the task. When the delegation goes to a provider that does not hold the
// state (the context moved, or the newest turn was of another profile), the
// offer carries the context's history: one file part of media type
// HistoryMediaType holding the earlier turns, newest kept first under a byte
// bound. The provider gives that history to the executor and keeps it as
// the context's state in place of what it had.

// HistoryMediaType marks the file part of an offer that carries a
// context's history.
const HistoryMediaType = "application/vnd.kith.context-history+json"

// historyVersion is the version of the history document; a provider
// refuses others.
const historyVersion = 1

// maxHistoryTurns bounds the turns one history document may list, apart
// from its size.
const maxHistoryTurns = 1024

// historyDoc is the JSON document in a history part.
type historyDoc struct {
	Version int           `json:"version"`
	Turns   []historyTurn `json:"turns"`
}

// historyTurn is one turn: an executor.Turn, and the requester's id of the
// delegation it came from (informative).
type historyTurn struct {
	Delegation string `json:"delegation,omitempty"`
	executor.Turn
}

// ErrBadHistory: an offer's context history part is malformed.
var ErrBadHistory = errors.New("delegation: malformed context history")

// decodeHistory reads a history document strictly: one JSON object of
// the known version and fields, at most maxHistoryTurns turns, every data
// part a JSON object and every delegation id well formed.
func decodeHistory(b []byte) (historyDoc, error) {
	var h historyDoc
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return historyDoc{}, fmt.Errorf("%w: %v", ErrBadHistory, err)
	}
	if dec.More() {
		return historyDoc{}, fmt.Errorf("%w: trailing data after the document", ErrBadHistory)
	}
	if _, err := dec.Token(); err == nil {
		return historyDoc{}, fmt.Errorf("%w: trailing data after the document", ErrBadHistory)
	}
	if h.Version != historyVersion {
		return historyDoc{}, fmt.Errorf("%w: version %d (this node reads %d)", ErrBadHistory, h.Version, historyVersion)
	}
	if len(h.Turns) > maxHistoryTurns {
		return historyDoc{}, fmt.Errorf("%w: %d turns, at most %d", ErrBadHistory, len(h.Turns), maxHistoryTurns)
	}
	for i, t := range h.Turns {
		if t.Delegation != "" {
			var id protocol.DelegationID
			if err := id.UnmarshalText([]byte(t.Delegation)); err != nil {
				return historyDoc{}, fmt.Errorf("%w: turns[%d].delegation: %v", ErrBadHistory, i, err)
			}
		}
		if err := protocol.CheckProfileName(t.Profile); t.Profile != "" && err != nil {
			return historyDoc{}, fmt.Errorf("%w: turns[%d].profile: %v", ErrBadHistory, i, err)
		}
		for j, d := range t.Data {
			if t := bytes.TrimLeft(d, " \t\r\n"); len(t) == 0 || t[0] != '{' {
				return historyDoc{}, fmt.Errorf("%w: turns[%d].data[%d]: not a JSON object", ErrBadHistory, i, j)
			}
		}
		if !utf8.ValidString(t.Task) || !utf8.ValidString(t.Result) {
			return historyDoc{}, fmt.Errorf("%w: turns[%d]: text is not UTF-8", ErrBadHistory, i)
		}
	}
	return h, nil
}

func (h historyDoc) turns() []executor.Turn {
	out := make([]executor.Turn, len(h.Turns))
	for i, t := range h.Turns {
		out[i] = t.Turn
	}
	return out
}

// splitHistory separates an offer's history part from the rest of its
// parts. An offer carries at most one, with its bytes inline.
func splitHistory(parts []protocol.Part) (rest []protocol.Part, h *historyDoc, err error) {
	for i, p := range parts {
		if p.Kind != protocol.PartFile || p.File.MediaType != HistoryMediaType {
			continue
		}
		if h != nil {
			return nil, nil, fmt.Errorf("%w: parts[%d]: a second history part", ErrBadHistory, i)
		}
		if p.File.URI != "" {
			return nil, nil, fmt.Errorf("%w: parts[%d]: history by URI; it travels inline", ErrBadHistory, i)
		}
		d, err := decodeHistory(p.File.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("parts[%d]: %w", i, err)
		}
		h = &d
		rest = slices.Concat(parts[:i:i], parts[i+1:])
	}
	if h == nil {
		return parts, nil, nil
	}
	return rest, h, nil
}

// historyPart encodes turns as an offer's history part.
func historyPart(turns []historyTurn) (protocol.Part, error) {
	b, err := json.Marshal(historyDoc{Version: historyVersion, Turns: turns})
	if err != nil {
		return protocol.Part{}, err
	}
	return protocol.FilePart(protocol.File{Name: "context-history.json", MediaType: HistoryMediaType, Bytes: b}), nil
}

// contextPeers reads the requester's view of req's context: affine is the
// provider of the newest completed delegation of req's profile (the one
// affinity prefers), holder the provider that holds the context's state
// (the newest completed delegation's, of any profile, within the TTL; this
// node's own id when that one ran here). Both are empty for a context
// without completed delegations.
func (e *requesterHalf) contextPeers(ctxID protocol.ContextID, profile string) (affine, holder peer.ID) {
	if ctxID == "" {
		return "", ""
	}
	c, err := e.st.GetContext(ctxID)
	if err != nil {
		return "", ""
	}
	ttl := e.st.ContextLimits().TTL
	first := true
	for _, id := range slices.Backward(c.Delegations) {
		d, err := e.st.DelegationInfo(store.RoleRequester, id)
		if err != nil || d.State != protocol.StateCompleted {
			continue
		}
		p := d.Peer
		if !d.Remote {
			p = e.id.PeerID()
		}
		if first {
			first = false
			if e.cfg.Now().Before(d.UpdatedAt.Add(ttl)) {
				holder = p
			}
		}
		if d.Profile == profile && d.Remote {
			return p, holder
		}
	}
	return "", holder
}

// contextHistory builds the history of a context from this node's own
// records, newest turns first until maxBytes of encoded turns, returned
// oldest first. skip is a delegation left out (the one being run).
func (e *core) contextHistory(ctxID protocol.ContextID, maxBytes int, skip protocol.DelegationID) []historyTurn {
	c, err := e.st.GetContext(ctxID)
	if err != nil || maxBytes <= 0 {
		return nil
	}
	var out []historyTurn
	used := 0
	for _, id := range slices.Backward(c.Delegations) {
		if id == skip {
			continue
		}
		d, err := e.st.GetDelegation(store.RoleRequester, id)
		if err != nil || d.State != protocol.StateCompleted {
			continue
		}
		t, ok := turnOf(d)
		if !ok {
			continue
		}
		n := turnSize(t)
		if used+n > maxBytes {
			break // newest kept first: an older turn never jumps a gap
		}
		used += n
		out = append(out, t)
	}
	slices.Reverse(out)
	return out
}

// turnOf reads a completed delegation's task and result as a turn.
func turnOf(d store.Delegation) (historyTurn, bool) {
	m, err := protocol.DecodeMessage(d.Offer)
	if err != nil {
		return historyTurn{}, false
	}
	o, ok := m.(*protocol.DelegationOffer)
	if !ok {
		return historyTurn{}, false
	}
	t := historyTurn{Delegation: d.ID.String(), Turn: turnInput(o.Task.Parts, o.Profile)}
	if len(d.Result) > 0 {
		if m, err := protocol.DecodeMessage(d.Result); err == nil {
			if r, ok := m.(*protocol.DelegationResult); ok {
				t.Result = partsText(r.Output)
			}
		}
	}
	return t, true
}

// turnInput is a turn's task as an executor sees it (taskInput's rule),
// the history part left out.
func turnInput(parts []protocol.Part, profile string) executor.Turn {
	rest, _, err := splitHistory(parts)
	if err != nil {
		rest = slices.DeleteFunc(slices.Clone(parts), func(p protocol.Part) bool {
			return p.Kind == protocol.PartFile && p.File.MediaType == HistoryMediaType
		})
	}
	in := taskInput(&protocol.DelegationOffer{Task: protocol.Task{Parts: rest}})
	t := executor.Turn{Profile: profile, Task: in.Text, Result: ""}
	for _, d := range in.Data {
		t.Data = append(t.Data, json.RawMessage(d))
	}
	return t
}

// turnSize is a turn's encoded size, what history and state bounds count.
func turnSize(t historyTurn) int {
	b, err := json.Marshal(t)
	if err != nil {
		return 0
	}
	return len(b) + 1 // and its comma
}

// historyOverhead is what a history document adds to its turns.
const historyOverhead = 64

// carryHistory returns req's task parts, with the context's history added
// when target does not hold the context's state. The history keeps the
// newest turns that fit in what target carries beside the task (limit) and
// what a provider keeps of a context by default.
func (e *requesterHalf) carryHistory(req Request, target, holder peer.ID, limit, size int) ([]protocol.Part, error) {
	if req.ContextID == "" || target == holder {
		return req.Task.Parts, nil
	}
	room := min(limit, e.maxPayload) - size - historyOverhead
	room = min(room, e.st.ContextLimits().MaxTurnBytes-historyOverhead)
	turns := e.contextHistory(req.ContextID, room, protocol.DelegationID{})
	if len(turns) == 0 {
		return req.Task.Parts, nil
	}
	p, err := historyPart(turns)
	if err != nil {
		return nil, fmt.Errorf("%w: context history: %v", ErrBadRequest, err)
	}
	return slices.Concat(req.Task.Parts, []protocol.Part{p}), nil
}

// checkContextOffer validates an offer's history part, if any: well
// formed, with a context id, and within what this node keeps of a context.
func (e *providerHalf) checkContextOffer(o *protocol.DelegationOffer) *RejectedError {
	_, h, err := splitHistory(o.Task.Parts)
	if err != nil {
		return &RejectedError{protocol.ReasonNotAllowed, err.Error()}
	}
	if h == nil {
		return nil
	}
	if o.ContextID == "" {
		return &RejectedError{protocol.ReasonNotAllowed, ErrBadHistory.Error() + ": a history part in an offer without a context id"}
	}
	n := 0
	for _, t := range h.Turns {
		n += turnSize(t)
	}
	if limit := e.st.ContextLimits().MaxTurnBytes; n > limit {
		return &RejectedError{protocol.ReasonPayloadTooLarge,
			fmt.Sprintf("context history of %d bytes, this node keeps at most %d per context", n, limit)}
	}
	return nil
}

// contextInput gives a task's executor its context's history: for a local
// task, from this node's own records of the context; for a remote one, what
// the requester carried, else what this node kept of the requester's
// context.
func (e *providerHalf) contextInput(t *task, in *executor.Task) {
	ctxID := t.offer.ContextID
	if ctxID == "" {
		return
	}
	if t.role != store.RoleProvider {
		for _, h := range e.contextHistory(ctxID, e.st.ContextLimits().MaxTurnBytes, t.id) {
			in.History = append(in.History, h.Turn)
		}
		return
	}
	if _, h, err := splitHistory(t.offer.Task.Parts); err == nil && h != nil {
		in.History = h.turns()
		return
	}
	c, err := e.st.GetPeerContext(t.requester, ctxID)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			e.log.Warn("read context state", "delegation", t.id, "context", ctxID, "err", err)
		}
		return
	}
	for _, ct := range c.Turns {
		var h historyTurn
		if err := json.Unmarshal(ct.Data, &h); err != nil {
			e.log.Warn("context turn unreadable", "context", ctxID, "delegation", ct.Delegation, "err", err)
			continue
		}
		in.History = append(in.History, h.Turn)
	}
}

// keepTurn records a completed remote task as a turn of its requester's
// context, before its result is stored and sent: the requester's next
// delegation in the context, offered the moment the result arrives, finds
// it. A carried history replaces what was kept. A failure to record is
// logged; the result still goes out.
func (e *providerHalf) keepTurn(t *task, state protocol.State, out []protocol.Part) {
	ctxID := t.offer.ContextID
	if ctxID == "" || t.role != store.RoleProvider || state != protocol.StateCompleted {
		return
	}
	limit := e.st.ContextLimits().MaxTurnBytes
	var turns []store.ContextTurn
	add := func(h historyTurn, id protocol.DelegationID) {
		b, err := json.Marshal(fitTurn(h, limit))
		if err == nil && len(b) <= limit {
			turns = append(turns, store.ContextTurn{Delegation: id, Data: b})
		}
	}
	_, carried, err := splitHistory(t.offer.Task.Parts)
	if err == nil && carried != nil {
		for _, h := range carried.Turns {
			var id protocol.DelegationID
			_ = id.UnmarshalText([]byte(h.Delegation))
			add(h, id)
		}
	}
	cur := historyTurn{Delegation: t.wire.String(), Turn: turnInput(t.offer.Task.Parts, t.offer.Profile)}
	cur.Result = partsText(out)
	add(cur, t.wire)
	if _, err := e.st.AddPeerContextTurns(t.requester, ctxID, carried != nil, turns...); err != nil {
		e.log.Warn("store context turn", "delegation", t.id, "context", ctxID, "err", err)
	}
}

// fitTurn cuts a turn's texts (the result first, then the task) so that
// it encodes in at most limit bytes; data parts that do not fit go.
func fitTurn(h historyTurn, limit int) historyTurn {
	for range 8 {
		over := turnSize(h) - limit
		if over <= 0 {
			return h
		}
		switch {
		case len(h.Data) > 0:
			h.Data = nil
		case len(h.Result) > 0:
			h.Result = cutUTF8(h.Result, len(h.Result)-over-8)
		default:
			h.Task = cutUTF8(h.Task, len(h.Task)-over-8)
		}
	}
	return h
}

// cutUTF8 keeps at most n bytes of s without splitting a rune.
func cutUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
