package node

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/internal/labtest"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
)

// xss is what a hostile peer calls itself: its libp2p user agent, which
// the dashboard shows beside its row.
const xss = `<img src=x onerror=alert(1)>`

// chromium finds Debian's Chromium. Without it the browser test skips,
// except under KITH_BROWSER_REQUIRED=1 (set by .ci/run), where a skip
// proves nothing and fails.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	labtest.Lacking(t, labtest.BrowserRequired, "chromium not found (apt-get install chromium)")
	return ""
}

// The dashboard in a real headless Chromium: sign in with the token, see
// two peers and a running remote delegation arrive live, deny a peer with
// a click (and find it denied through the API), and show a hostile user
// agent as text. Screenshots go to KITH_SCREENSHOT_DIR, or the test's
// temp dir.
func TestDashboardInChromium(t *testing.T) {
	bin := chromium(t)
	release := make(chan struct{})
	var released atomic.Bool
	unblock := func() {
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	}
	t.Cleanup(unblock)
	slow := func(ctx context.Context, task executor.Task, emit func(executor.Update)) (executor.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return executor.Result{}, ctx.Err()
		}
		return executor.Result{Text: "done", Usage: executor.Usage{Prompt: 3, Completion: 1, Total: 4}}, nil
	}
	b := startWithOptions(t, func(c *config.Config) { c.API.Listen = "127.0.0.1:0" },
		Options{Handlers: map[string]executor.HandlerFunc{"slow": slow}})
	token, err := ReadToken(b.home)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + b.HTTPAddr()
	shots := os.Getenv("KITH_SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 900))
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	var alerted atomic.Bool
	chromedp.ListenTarget(bctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			alerted.Store(true)
			go func() { _ = chromedp.Run(bctx, page.HandleJavaScriptDialog(false)) }()
		}
	})
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// until polls a JavaScript condition in the page.
	until := func(what, expr string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var ok bool
			if err := chromedp.Run(bctx, chromedp.Evaluate(expr, &ok)); err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				shot(t, bctx, filepath.Join(shots, "dashboard-timeout.png"))
				t.Fatalf("timed out waiting until %s (%s)", what, expr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// A wrong token is refused; the right one signs in.
	run("open the dashboard", chromedp.Navigate(base+DashboardPath), chromedp.WaitVisible("#token", chromedp.ByQuery))
	run("sign in with a wrong token", chromedp.SendKeys("#token", "kith_wrong", chromedp.ByQuery),
		chromedp.Click("#signin", chromedp.ByQuery), chromedp.WaitVisible("#bad-token", chromedp.ByQuery))
	run("sign in", chromedp.WaitVisible("#token", chromedp.ByQuery), chromedp.SendKeys("#token", token, chromedp.ByQuery),
		chromedp.Click("#signin", chromedp.ByQuery), chromedp.WaitVisible("#app", chromedp.ByQuery))
	until("the node shows", `document.querySelector('[data-field="peer-id"]')?.textContent === `+jsString(b.PeerID().String()))
	shot(t, bctx, filepath.Join(shots, "dashboard-empty.png"))

	// Two peers arrive while the page is open: a requester and a hostile one.
	a := startWith(t, nil)
	change(t, b, a.PeerID(), api.PeerChange{Trust: new(api.Verified)})
	if err := connect(a, b); err != nil {
		t.Fatal(err)
	}
	rogue, err := libp2p.New(libp2p.UserAgent(xss), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	if err := rogue.Connect(ctx, peer.AddrInfo{ID: b.PeerID(), Addrs: b.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	until("two peers show", `document.querySelectorAll('#peers tbody tr').length === 2`)

	// A remote delegation runs on B: it appears, running, with its network icon.
	id, err := a.Engine().Delegate(ctx, delegation.Request{Profile: "slow", Peer: b.PeerID(), BudgetTokens: 64,
		Task: protocol.Task{Role: "user", Parts: []protocol.Part{protocol.TextPart("take your time")}}})
	if err != nil {
		t.Fatal(err)
	}
	until("the remote delegation shows running",
		`[...document.querySelectorAll('#tree li[data-remote="true"][data-state="running"]')].some(li => getComputedStyle(li.querySelector('.icon.net')).backgroundImage.includes('net.svg'))`)
	rogueRow := `document.querySelector('#peers tr[data-peer="` + rogue.ID().String() + `"]')`
	until("the hostile agent shows as text", rogueRow+`?.querySelector('[data-field="agent"]')?.textContent === `+jsString(xss))
	var imgs int
	run("count images", chromedp.Evaluate(`document.querySelectorAll('img').length`, &imgs))
	if imgs != 0 || alerted.Load() {
		t.Fatalf("the peer's user agent became markup: %d img elements, alert fired %v", imgs, alerted.Load())
	}
	shot(t, bctx, filepath.Join(shots, "dashboard.png"))

	// Deny the hostile peer with a click; the API agrees.
	run("click deny", chromedp.Click(`#peers tr[data-peer="`+rogue.ID().String()+`"] button[data-action="deny"]`, chromedp.ByQuery))
	until("the row says denied", rogueRow+`?.querySelector('[data-field="access"]')?.textContent === 'deny'`)
	c := api.NewClient(b.SocketPath())
	defer c.Close()
	peers, err := c.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		if want := api.AccessNone; p.ID == a.PeerID().String() && p.Access != want {
			t.Errorf("requester access %q, want %q", p.Access, want)
		}
		if p.ID == rogue.ID().String() && p.Access.String() != "deny" {
			t.Errorf("hostile peer access %q after the click, want deny", p.Access)
		}
	}

	// The delegation finishes; the page follows.
	unblock()
	if d, err := a.Engine().Wait(ctx, id); err != nil || d.State != protocol.StateCompleted {
		t.Fatalf("delegation: %v %v", d.State, err)
	}
	until("the delegation shows completed", `!!document.querySelector('#tree li[data-remote="true"][data-state="completed"]')`)
	shot(t, bctx, filepath.Join(shots, "dashboard-done.png"))
	if alerted.Load() {
		t.Fatal("a JavaScript dialog opened")
	}
}

func shot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	var buf []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&buf, 100)); err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`)
	return "'" + r.Replace(s) + "'"
}

// The dashboard's locks without a browser: the page carries a strict CSP,
// the session cookie is HttpOnly and SameSite=Strict, a change without the
// CSRF header is refused, and a change from another origin is refused.
func TestDashboardSessionAndCSRF(t *testing.T) {
	b := startWith(t, func(c *config.Config) { c.API.Listen = "127.0.0.1:0" })
	token, err := ReadToken(b.home)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + b.HTTPAddr()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}

	resp, err := hc.Get(base + DashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	if r, _ := hc.Get(base + DashboardPath + "session"); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("session without signing in: %s", r.Status)
	}
	resp, err = hc.PostForm(base+DashboardPath+"login", url.Values{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Request.Response.Cookies() {
		if c.Name == sessionCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || strings.Contains(cookie.Value, token) {
		t.Fatalf("session cookie %+v", cookie)
	}
	if r, _ := hc.Get(base + api.Prefix + "/peers"); r.StatusCode != http.StatusOK {
		t.Fatalf("API with the session cookie: %s", r.Status)
	}
	change := func(hdr map[string]string) int {
		req, _ := http.NewRequest("POST", base+api.Prefix+"/peers/"+b.PeerID().String(), strings.NewReader(`{"access":"deny"}`))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		r, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r.StatusCode
	}
	if code := change(nil); code != http.StatusForbidden {
		t.Errorf("change without the CSRF header: %d, want 403", code)
	}
	csrf := derive(token, "csrf")
	if code := change(map[string]string{csrfHeader: csrf, "Origin": "http://evil.example"}); code != http.StatusForbidden {
		t.Errorf("change from another origin: %d, want 403", code)
	}
	if code := change(map[string]string{csrfHeader: csrf, "Origin": base}); code == http.StatusForbidden || code == http.StatusUnauthorized {
		t.Errorf("change with the CSRF header from the page's origin: %d", code)
	}
}

func TestDashboardURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:7780": "http://127.0.0.1:7780/dashboard/",
		"0.0.0.0:7780":   "http://127.0.0.1:7780/dashboard/",
		"[::]:7780":      "http://[::1]:7780/dashboard/",
		"[fd00::1]:80":   "http://[fd00::1]:80/dashboard/",
	} {
		if got := DashboardURL(addr); got != want {
			t.Errorf("DashboardURL(%q) = %q, want %q", addr, got, want)
		}
	}
}
