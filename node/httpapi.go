package node

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/gateway"
)

// OpenAPIPath is where the listener serves the REST API's OpenAPI document.
const OpenAPIPath = "/api/v1/openapi.json"

// httpAPI is the [api] listener: the REST API, its OpenAPI document and
// the A2A gateway, behind the bearer token when one is required.
type httpAPI struct {
	n        *Node
	required bool
	bodies   *bodyBudget

	mu    sync.RWMutex
	token string
	base  string
}

func (h *httpAPI) currentToken() string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.token
}

func (h *httpAPI) setToken(t string) {
	h.mu.Lock()
	h.token = t
	h.mu.Unlock()
}

func (h *httpAPI) baseURL() string {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.base
}

// public paths need no token: a client reads the card to learn that it
// needs one, and the OpenAPI document describes nothing secret.
func public(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions {
		return false
	}
	p := r.URL.Path
	return p == OpenAPIPath || strings.HasPrefix(p, "/.well-known/") ||
		(strings.HasPrefix(p, "/a2a/") && strings.Contains(p, "/.well-known/"))
}

func (h *httpAPI) handler(gw *gateway.Gateway) http.Handler {
	mux := http.NewServeMux()
	rest := h.n.apiHandler()
	mux.Handle(api.Prefix+"/", http.MaxBytesHandler(rest, h.n.cfg.API.MaxBodyBytes))
	mux.HandleFunc("GET "+OpenAPIPath, serveOpenAPI)
	if h.n.metrics != nil {
		mux.Handle("GET "+MetricsPath, h.n.metrics.handler())
	}
	h.dashboardRoutes(mux)
	mux.Handle("/", gw.Handler())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !safeMethod(r.Method) && h.crossOrigin(r) {
			writeJSON(w, http.StatusForbidden, api.Error{Error: "refused: a request from a page of another origin"})
			return
		}
		bearer := h.authorized(r)
		cookie := !bearer && h.session(r)
		if cookie && !safeMethod(r.Method) && r.URL.Path != DashboardPath+"login" && !h.csrfOK(r) {
			writeJSON(w, http.StatusForbidden, api.Error{Error: "refused: the dashboard's CSRF token is missing or stale (" + csrfHeader + ")"})
			return
		}
		if h.required && !bearer && !cookie && !public(r) && !publicDashboard(r) {
			unauthorized(w, r)
			return
		}
		release, ok := h.bodies.take(r)
		if !ok {
			h.bodies.busy(w, r)
			return
		}
		defer release()
		mux.ServeHTTP(w, r)
	})
}

func (h *httpAPI) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && tokenMatches(strings.TrimSpace(tok), h.currentToken())
}

// unauthorized answers 401 in the shape the caller speaks: a JSON-RPC
// error (A2A code -31401) to a JSON-RPC POST, else a JSON error.
func unauthorized(w http.ResponseWriter, r *http.Request) {
	const msg = "unauthenticated: this listener wants the node's API token as \"Authorization: Bearer <token>\" (kith api token prints it)"
	w.Header().Set("WWW-Authenticate", `Bearer realm="kith"`)
	refuse(w, r, http.StatusUnauthorized, -31401, msg)
}

// startHTTPAPI listens on [api] listen; the returned serve runs until the
// server is shut down.
func (n *Node) startHTTPAPI() (*http.Server, net.Listener, *httpAPI, error) {
	token, err := EnsureToken(n.home)
	if err != nil {
		return nil, nil, nil, err
	}
	ln, err := net.Listen("tcp", n.cfg.API.Listen)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("node: api listen %s: %w", n.cfg.API.Listen, err)
	}
	h := &httpAPI{n: n, required: n.cfg.API.TokenRequired(), token: token, bodies: newBodyBudget(n.cfg.API.MaxBodyBytes)}
	h.base = strings.TrimSuffix(n.cfg.API.PublicURL, "/")
	if h.base == "" {
		h.base = "http://" + ln.Addr().String()
	}
	gw := gateway.New(gateway.Config{
		Engine: n.Engine(), Store: n.Store(), Identity: n.id, BaseURL: h.baseURL,
		TokenRequired: h.required, MaxBodyBytes: n.cfg.API.MaxBodyBytes, Version: Version, Logger: n.opts.Logger,
	})
	srv := &http.Server{Handler: h.handler(gw), ReadHeaderTimeout: 10 * time.Second}
	return srv, ln, h, nil
}

// HTTPAddr is the address the [api] listener bound, "" when it is off;
// valid after Ready.
func (n *Node) HTTPAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.httpLn == nil {
		return ""
	}
	return n.httpLn.Addr().String()
}

// handleToken answers GET and POST /api-token on the unix socket only:
// the token, and with POST a fresh one that the listener uses at once.
func (n *Node) handleToken(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	h := n.httpAPI
	n.mu.Unlock()
	var tok string
	var err error
	if r.Method == http.MethodPost {
		tok, err = RotateToken(n.home)
		if err == nil && h != nil {
			h.setToken(tok)
		}
	} else {
		tok, err = EnsureToken(n.home)
	}
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Token{Token: tok, Required: n.cfg.API.Enabled() && n.cfg.API.TokenRequired()})
}

// serveHTTPAPI serves until Shutdown.
func serveHTTPAPI(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("node: http api: %w", err)
	}
	return nil
}
