package api

import (
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Prefix is the path prefix of every route.
const Prefix = "/api/v1/a2a"

// The enums the API carries are the node's own typed values, which travel
// in JSON as their names ("verified", "deny", "completed", "requester")
// through MarshalText and UnmarshalText. They are named here so that a
// client needs only this package.
type (
	// Trust is how far a node trusts a peer: untrusted, verified, trusted.
	Trust = protocol.TrustLevel
	// Access is a peer's allow/deny entry: none, allow, deny.
	Access = store.Access
	// State is a delegation's state: offered, running, completed, ...
	State = protocol.State
	// Role is this node's side of a delegation: requester or provider.
	Role = store.Role
)

// The values clients compare against.
const (
	Untrusted = protocol.Untrusted
	Verified  = protocol.Verified
	Trusted   = protocol.Trusted

	AccessNone  = store.AccessNone
	AccessAllow = store.AccessAllow
	AccessDeny  = store.AccessDeny

	StateCompleted     = protocol.StateCompleted
	StateInputRequired = protocol.StateInputRequired

	RoleRequester = store.RoleRequester
	RoleProvider  = store.RoleProvider
)

// ParseTrust reads a trust level as a user writes it.
func ParseTrust(s string) (Trust, error) {
	var t Trust
	if err := t.UnmarshalText([]byte(s)); err != nil {
		return t, fmt.Errorf("trust level %q: want untrusted, verified or trusted", s)
	}
	return t, nil
}

// ParseState reads a delegation state as a user writes it.
func ParseState(s string) (State, error) {
	var st State
	if err := st.UnmarshalText([]byte(s)); err != nil {
		return st, fmt.Errorf("state %q: not a delegation state", s)
	}
	return st, nil
}

// NodeInfo is GET /node.
type NodeInfo struct {
	PeerID   string   `json:"peer_id"`
	Addrs    []string `json:"addrs"` // full multiaddrs ending in /p2p/<peer id>
	Profiles []string `json:"profiles"`
	Version  string   `json:"version"`
	// HTTPAddr is the address the [api] listener bound; empty when off.
	HTTPAddr string `json:"http_addr,omitempty"`
}

// Peer is one entry of GET /peers.
type Peer struct {
	ID        string    `json:"id"`
	Addrs     []string  `json:"addrs"`
	Sources   []string  `json:"sources"`
	Trust     Trust     `json:"trust"`
	Access    Access    `json:"access"`
	Connected bool      `json:"connected"`
	LastSeen  time.Time `json:"last_seen,omitzero"`
}

// AddPeer is POST /peers.
type AddPeer struct {
	Addr   string `json:"addr"`
	Origin string `json:"origin,omitempty"` // for the audit log; default "api"
}

// MaxTaskBytes is the largest task text a delegation carries; the daemon
// may hold less (its store's value cap) and says so with a 413.
const MaxTaskBytes = protocol.MaxPayload

// MaxDelegateBody caps POST /delegations: a task of MaxTaskBytes whose
// every byte JSON escapes to six ("\u00XX"), and room for the other fields.
const MaxDelegateBody = 6*MaxTaskBytes + 1<<20

// DelegateRequest is POST /delegations.
type DelegateRequest struct {
	Profile   string `json:"profile"`
	Peer      string `json:"peer,omitempty"`
	Text      string `json:"text"`
	Budget    uint64 `json:"budget,omitempty"`
	Timeout   string `json:"timeout,omitempty"` // Go duration text, e.g. "30s"
	ContextID string `json:"context_id,omitempty"`
	Parent    string `json:"parent,omitempty"`
}

// DelegateResponse answers POST /delegations.
type DelegateResponse struct {
	ID string `json:"id"`
}

// Usage is token usage.
type Usage struct {
	Prompt     uint64 `json:"prompt"`
	Completion uint64 `json:"completion"`
	Total      uint64 `json:"total"`
}

// Delegation is GET /delegations/{id} and one entry of GET /delegations.
type Delegation struct {
	ID        string `json:"id"`
	Role      Role   `json:"role"`
	Profile   string `json:"profile"`
	State     State  `json:"state"`
	Reason    string `json:"reason,omitempty"`
	Remote    bool   `json:"remote"`
	Peer      string `json:"peer,omitempty"`
	Parent    string `json:"parent,omitempty"`
	ContextID string `json:"context_id,omitempty"`
	Budget    uint64 `json:"budget"`
	Usage     Usage  `json:"usage"`
	Output    string `json:"output,omitempty"`
	// OutputOmitted: a listing (GET /delegations, /tree) left out an
	// output larger than it carries (64 KiB); GET /delegations/{id} has it.
	OutputOmitted bool      `json:"output_omitted,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	Terminal      bool      `json:"terminal"`
	// Question is what a delegation in state input_required asks (on GET
	// /delegations/{id} and a reply's answer); answer it with POST
	// /delegations/{id}/reply. Turn is the turn it ends.
	Question string `json:"question,omitempty"`
	Turn     uint32 `json:"turn,omitempty"`
}

// Reply is the body of POST /delegations/{id}/reply: the answer to the
// question of a delegation waiting for input.
type Reply struct {
	Text string `json:"text"`
}

// TreeNode is one node of GET /tree.
type TreeNode struct {
	Delegation
	Children []TreeNode `json:"children,omitempty"`
}

// Event is one event of a delegation's log, as sent on
// GET /delegations/{id}/events (server-sent events, "data: <json>").
type Event struct {
	Seq      uint64    `json:"seq"`
	At       time.Time `json:"at"`
	Type     string    `json:"type"`
	State    State     `json:"state"`
	Partial  string    `json:"partial,omitempty"`
	Progress uint32    `json:"progress_permille,omitempty"`
	Terminal bool      `json:"terminal"`
}

// Proof is GET /delegations/{id}/verify.
type Proof struct {
	Valid     bool   `json:"valid"`
	Error     string `json:"error,omitempty"`
	Provider  string `json:"provider,omitempty"`
	Requester string `json:"requester,omitempty"`
	State     State  `json:"state,omitzero"`
	Usage     Usage  `json:"usage"`
	// Digest names the hash of the two digests after it: "sha256", or
	// "blake3" for a proof made with BLAKE3 (protocol 1.6).
	Digest           string `json:"digest,omitempty"`
	OfferDigest      string `json:"offer_digest,omitempty"`      // hex
	TranscriptDigest string `json:"transcript_digest,omitempty"` // hex
	// OfferSHA256 and Transcript are OfferDigest and TranscriptDigest
	// again when Digest is "sha256", as before there was a choice.
	OfferSHA256 string    `json:"offer_sha256,omitempty"`
	Transcript  string    `json:"transcript_sha256,omitempty"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
	// Turns is how many turns the proof covers, when more than one.
	Turns uint32 `json:"turns,omitempty"`
}

// TruncatedHeader is set to "true" on GET /delegations when older
// matches were left out by the limit.
const TruncatedHeader = "Kith-Truncated"

// DefaultListLimit and MaxListLimit bound GET /delegations?limit=.
const (
	DefaultListLimit = 1000
	MaxListLimit     = 100000
)

// ListQuery is the query of GET /delegations.
type ListQuery struct {
	Limit  int       // the newest Limit matches; 0: DefaultListLimit
	Since  time.Time // created at or after; zero: any time
	States []State   // any of these states; none: every state
}

// Values encodes q as a URL query.
func (q ListQuery) Values() url.Values {
	v := url.Values{}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	for _, s := range q.States {
		v.Add("state", s.String())
	}
	return v
}

// ParseListQuery decodes and checks a GET /delegations query.
func ParseListQuery(v url.Values) (ListQuery, error) {
	q := ListQuery{Limit: DefaultListLimit}
	for _, s := range v["state"] {
		st, err := ParseState(s)
		if err != nil {
			return q, err
		}
		q.States = append(q.States, st)
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxListLimit {
			return q, fmt.Errorf("limit %q: want 1 to %d", s, MaxListLimit)
		}
		q.Limit = n
	}
	if s := v.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return q, fmt.Errorf("since %q: want an RFC 3339 time like 2026-01-02T15:04:05Z", s)
		}
		q.Since = t
	}
	return q, nil
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}

// PeerChange is POST /peers/{id} (and DELETE /peers/{id} to forget one):
// exactly one of Trust, Access or Remove.
type PeerChange struct {
	Trust  *Trust  `json:"trust,omitempty"`  // untrusted|verified|trusted
	Access *Access `json:"access,omitempty"` // none|allow|deny
	Remove bool    `json:"remove,omitempty"`
	Origin string  `json:"origin,omitempty"` // for the audit log; "api" if empty
}

// AuditEntry is one entry of GET /peers/log.
type AuditEntry struct {
	Seq    uint64    `json:"seq"`
	At     time.Time `json:"at"`
	Peer   string    `json:"peer"`
	Action string    `json:"action"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Origin string    `json:"origin"`
}

// GPU is GET /gpu: the inventory and the VRAM leases held.
type GPU struct {
	NoGPU       string     `json:"no_gpu,omitempty"` // why there is no GPU inventory
	Declared    bool       `json:"declared"`         // VRAM declared in config, not read from NVML
	Inventory   string     `json:"inventory,omitempty"`
	HeadroomMiB uint64     `json:"headroom_mib"`
	Leases      []GPULease `json:"leases"`
}

// GPULease is one VRAM lease.
type GPULease struct {
	ID        string    `json:"id"`
	Owner     string    `json:"owner"`
	VRAMMiB   uint64    `json:"vram_mib"`
	Local     bool      `json:"local"`
	Device    string    `json:"device"`
	GrantedAt time.Time `json:"granted_at"`
}

// Profile is one entry of GET /profiles: a profile this node serves.
type Profile struct {
	Name            string   `json:"name"`
	Description     string   `json:"description,omitempty"`
	Skills          []string `json:"skills"`
	MaxBudgetTokens uint64   `json:"max_budget_tokens"`
	VRAMMiB         uint64   `json:"vram_mib"`
}

// Token is GET and POST /api-token (unix socket only): the bearer token
// the HTTP listener wants.
type Token struct {
	Token string `json:"token"`
	// Required says whether the listener asks for it ([api] listen off
	// loopback, or require_token).
	Required bool `json:"required"`
}

// DelegationEvent is one event of GET /events (server-sent events, "data:
// <json>"): something happened to one of this node's delegations.
type DelegationEvent struct {
	ID       string    `json:"id"`
	Role     Role      `json:"role"`
	Seq      uint64    `json:"seq"`
	At       time.Time `json:"at"`
	Type     string    `json:"type"`
	State    State     `json:"state"`
	Terminal bool      `json:"terminal"`
}

// Reload is POST /reload (unix socket only): the changed config keys now
// in effect, and those that need a restart.
type Reload struct {
	Applied     []string `json:"applied"`
	NeedRestart []string `json:"need_restart"`
}
