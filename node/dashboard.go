package node

import (
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// DashboardPath is where the [api] listener serves the dashboard.
const DashboardPath = "/dashboard/"

// The dashboard is static files in the binary: no CDN, no build step. Its
// script builds every element with textContent, never innerHTML, so a
// string a peer sent (a user agent, a profile description, an error text)
// is shown as text.
//
//go:embed dashboard
var dashboardFS embed.FS

const (
	sessionCookie = "kith_session"
	csrfHeader    = "X-Kith-CSRF"
	// dashboardCSP allows the page's own script and style and nothing
	// else: no inline script, no other origin, no framing.
	dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

// derive is a value bound to the API token: rotating the token ends every
// dashboard session and CSRF token at once, and neither reveals the token.
func derive(token, purpose string) string {
	if token == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("kith dashboard " + purpose))
	return hex.EncodeToString(m.Sum(nil))
}

// session reports whether r carries a valid dashboard session cookie.
func (h *httpAPI) session(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	return err == nil && tokenMatches(c.Value, derive(h.currentToken(), "session"))
}

// csrfOK reports whether an unsafe request from the dashboard carries its
// CSRF token. The session cookie is SameSite=Strict as well; the header
// is the second lock, and one a form on another site cannot set.
func (h *httpAPI) csrfOK(r *http.Request) bool {
	return tokenMatches(r.Header.Get(csrfHeader), derive(h.currentToken(), "csrf"))
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// crossOrigin reports whether a browser sent r from a page of another
// origin: such a request never changes anything, token or not (a node
// whose listener needs no token must not be driven by any web page the
// user visits).
func (h *httpAPI) crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none":
		return false
	case "same-site", "cross-site":
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false // not a browser, or one too old to say
	}
	u, err := url.Parse(o)
	if err != nil {
		return true
	}
	if u.Host == r.Host {
		return false
	}
	if b, err := url.Parse(h.baseURL()); err == nil && b.Host == u.Host {
		return false
	}
	return true
}

// publicDashboard: the page and its assets, and the login form's POST,
// need no token; everything they show comes from the API, which does.
func publicDashboard(r *http.Request) bool {
	p := r.URL.Path
	if r.Method == http.MethodPost {
		return p == DashboardPath+"login"
	}
	return safeMethod(r.Method) && strings.HasPrefix(p, DashboardPath) && p != DashboardPath+"session"
}

func dashboardHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", dashboardCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("Cache-Control", "no-store")
}

func (h *httpAPI) dashboardRoutes(mux *http.ServeMux) {
	sub, _ := fs.Sub(dashboardFS, "dashboard")
	files := http.FileServerFS(sub)
	mux.Handle("GET "+DashboardPath, http.StripPrefix(strings.TrimSuffix(DashboardPath, "/"), http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			dashboardHeaders(w)
			files.ServeHTTP(w, r)
		})))
	mux.HandleFunc("GET /dashboard", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, DashboardPath, http.StatusMovedPermanently)
	})
	mux.HandleFunc("POST "+DashboardPath+"login", h.login)
	mux.HandleFunc("POST "+DashboardPath+"logout", h.logout)
	mux.HandleFunc("GET "+DashboardPath+"session", h.sessionInfo)
}

// login checks the token from the form and sets the session cookie.
func (h *httpAPI) login(w http.ResponseWriter, r *http.Request) {
	dashboardHeaders(w)
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if !tokenMatches(tok, h.currentToken()) {
		http.Redirect(w, r, DashboardPath+"#bad-token", http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: derive(tok, "session"), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.HasPrefix(h.baseURL(), "https://"), // behind a TLS proxy too
	})
	http.Redirect(w, r, DashboardPath, http.StatusSeeOther)
}

func (h *httpAPI) logout(w http.ResponseWriter, r *http.Request) {
	dashboardHeaders(w)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// sessionInfo gives a signed-in page its CSRF token. Unlike the rest of
// the listener it wants a session even where no token is required: the
// dashboard always asks who is looking.
func (h *httpAPI) sessionInfo(w http.ResponseWriter, r *http.Request) {
	dashboardHeaders(w)
	if !h.session(r) && !h.authorized(r) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "not signed in"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"csrf": derive(h.currentToken(), "csrf")})
}

// DashboardURL is the address to open for a listener bound at addr
// (host:port): a wildcard host becomes loopback, which the bound
// listener also answers on.
func DashboardURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr + DashboardPath
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + DashboardPath
}
