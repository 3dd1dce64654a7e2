package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// Engine is what the gateway needs of the delegation engine.
type Engine interface {
	Delegate(ctx context.Context, req delegation.Request) (protocol.DelegationID, error)
	Cancel(id protocol.DelegationID, reason string) error
	// Reply and Question serve multi-turn tasks: a message whose taskId
	// names a task in INPUT_REQUIRED answers it.
	Reply(ctx context.Context, id protocol.DelegationID, answer protocol.Task) error
	Question(id protocol.DelegationID) (delegation.Question, error)
	Subscribe(role store.Role, id protocol.DelegationID) (<-chan store.Event, func())
	Profiles() []protocol.Profile
	KnownCapabilities() map[peer.ID]delegation.KnownCapability
}

// Config is what a Gateway needs. Every field but Logger is required.
type Config struct {
	Engine   Engine
	Store    *store.Store
	Identity *crypto.Identity
	// BaseURL is the listener's public base URL, without a trailing
	// slash, written into agent cards.
	BaseURL func() string
	// TokenRequired says whether cards declare the bearer scheme.
	TokenRequired bool
	// MaxBodyBytes caps a request body.
	MaxBodyBytes int64
	// Version is the node's version, the cards' version.
	Version string
	Logger  *slog.Logger
}

// Gateway serves the A2A agents of one node.
type Gateway struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	agents map[string]http.Handler // by profile; "" is the node agent
}

// New returns a gateway. It does no I/O.
func New(cfg Config) *Gateway {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Gateway{cfg: cfg, log: cfg.Logger.With("component", "gateway"), agents: make(map[string]http.Handler)}
}

// Handler serves the routes listed in the package comment; other paths
// are 404.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/agent-card.json", g.serveNodeCard)
	mux.HandleFunc("GET /.well-known/agent.json", g.serveNodeCard)
	mux.HandleFunc("GET /.well-known/jwks.json", g.serveJWKS)
	mux.HandleFunc("GET /a2a/{profile}/.well-known/agent-card.json", g.serveProfileCard)
	mux.HandleFunc("GET /a2a/{profile}/.well-known/agent.json", g.serveProfileCard)
	mux.Handle("POST /a2a", http.StripPrefix("/a2a", g.agentHandler("")))
	mux.Handle("/a2a/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest := strings.TrimPrefix(r.URL.Path, "/a2a/")
		name, _, _ := strings.Cut(rest, "/")
		if protocol.CheckProfileName(name) != nil {
			http.NotFound(w, r)
			return
		}
		if _, ok := g.profile(name); !ok {
			writeRPCError(w, http.StatusNotFound, nil, codeMethodNotFound, "no agent for profile "+quote(name)+" on this node or its verified peers", nil)
			return
		}
		http.StripPrefix("/a2a/"+name, g.agentHandler(name)).ServeHTTP(w, r)
	}))
	return mux
}

// agentHandler returns the handler of one agent: JSON-RPC on POST to its
// root (v1.0 or v0.3 by A2A-Version), HTTP+JSON v0.3 under /v1/, HTTP+JSON
// v1.0 elsewhere.
func (g *Gateway) agentHandler(profile string) http.Handler {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h, ok := g.agents[profile]; ok {
		return h
	}
	rh := &agent{g: g, profile: profile}
	// Streams of a long task may carry nothing for minutes; keep-alives
	// keep proxies and clients from giving up on them.
	ka := a2asrv.WithTransportKeepAlive(15 * time.Second)
	rpc := g.rpc(a2asrv.NewJSONRPCHandler(rh, ka), a2av0.NewJSONRPCHandler(rh, ka))
	rest1 := g.rest(a2asrv.NewRESTHandler(rh, ka))
	rest0 := g.rest(a2av0.NewRESTHandler(rh, ka))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "" || p == "/":
			rpc.ServeHTTP(w, r)
		case strings.HasPrefix(p, a2av0.RESTPathPrefix+"/"):
			rest0.ServeHTTP(w, r)
		default:
			rest1.ServeHTTP(w, r)
		}
	})
	g.agents[profile] = h
	return h
}

// profileInfo is a profile the node can serve, merged from its own and its
// peers' verified capabilities.
type profileInfo struct {
	protocol.Profile
	Local     bool
	Providers int // peers with a verified assertion offering it
}

func (g *Gateway) profiles() []profileInfo {
	byName := map[string]*profileInfo{}
	for _, p := range g.cfg.Engine.Profiles() {
		byName[p.Name] = &profileInfo{Profile: p, Local: true}
	}
	for _, k := range g.cfg.Engine.KnownCapabilities() {
		for _, p := range k.Assertion.Profiles {
			if pi, ok := byName[p.Name]; ok {
				pi.Providers++
				continue
			}
			byName[p.Name] = &profileInfo{Profile: p, Providers: 1}
		}
	}
	out := make([]profileInfo, 0, len(byName))
	for _, p := range byName {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b profileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (g *Gateway) profile(name string) (profileInfo, bool) {
	for _, p := range g.profiles() {
		if p.Name == name {
			return p, true
		}
	}
	return profileInfo{}, false
}
