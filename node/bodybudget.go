package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/kithmesh/kith/node/api"
)

// bodyBudget bounds the request bodies the HTTP listener reads at once.
// One body may be as large as a task a delegation carries (api
// max_body_bytes, 96 MiB by default), and a handler holds the whole of it
// while it decodes it; the budget, twice that cap, bounds how much of
// such bodies a burst of requests has read at once. A body of smallBody bytes or
// less takes nothing from it, so that everyday requests never wait on
// large ones. A request that would take more than is left is refused with
// 503 and Retry-After before its body is read; its share goes back once
// its body is read to the end or closed, or its handler returns.
type bodyBudget struct {
	sem *semaphore.Weighted
	max int64 // the cap on one body
}

// smallBody is the largest body that takes nothing from the budget.
const smallBody = 1 << 20

func newBodyBudget(maxBody int64) *bodyBudget {
	return &bodyBudget{sem: semaphore.NewWeighted(2 * maxBody), max: maxBody}
}

// take reserves r's body's share: the length it declares, or the cap when
// it declares none (chunked) or more (the cap refuses it after that much).
// r.Body then gives the share back at its end. release gives it back in
// any case; ok is false when the budget has no room.
func (b *bodyBudget) take(r *http.Request) (release func(), ok bool) {
	if r.Body == nil || r.Body == http.NoBody || (r.ContentLength >= 0 && r.ContentLength <= smallBody) {
		return func() {}, true
	}
	n := r.ContentLength
	if n < 0 || n > b.max {
		n = b.max
	}
	if !b.sem.TryAcquire(n) {
		return nil, false
	}
	var once sync.Once
	release = func() { once.Do(func() { b.sem.Release(n) }) }
	r.Body = &budgetedBody{ReadCloser: r.Body, done: release}
	return release, true
}

// budgetedBody gives its share of the budget back once read to its end
// (or to an error) or closed.
type budgetedBody struct {
	io.ReadCloser
	done func()
}

func (b *budgetedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done()
	}
	return n, err
}

func (b *budgetedBody) Close() error {
	b.done()
	return b.ReadCloser.Close()
}

// busy answers a request the body budget has no room for: 503 with
// Retry-After, in the shape the caller speaks (isRPC).
func (b *bodyBudget) busy(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Retry-After", "1")
	msg := fmt.Sprintf("busy: this node is reading %d MiB of large request bodies already; retry", 2*b.max>>20)
	refuse(w, r, http.StatusServiceUnavailable, -32000, msg)
}

// refuse writes a refusal with status: a JSON-RPC error with rpcCode to a
// JSON-RPC POST (isRPC), else a JSON error.
func refuse(w http.ResponseWriter, r *http.Request, status, rpcCode int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if isRPC(r) {
		_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": nil,
			"error": map[string]any{"code": rpcCode, "message": msg}})
		return
	}
	_ = json.NewEncoder(w).Encode(api.Error{Error: msg})
}

// isRPC reports whether r is a JSON-RPC call to the A2A gateway: a POST to
// /a2a or /a2a/<profile>.
func isRPC(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == "/a2a" || strings.Count(strings.TrimSuffix(r.URL.Path, "/"), "/") == 2 && strings.HasPrefix(r.URL.Path, "/a2a/"))
}
