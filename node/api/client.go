package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// ErrDaemonNotRunning: nothing listens on the API socket.
var ErrDaemonNotRunning = errors.New("kith daemon is not running")

// Client talks to a daemon over its unix socket.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the daemon listening on socket.
func NewClient(socket string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}
	return &Client{socket: socket, hc: &http.Client{Transport: tr}}
}

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	_, err := c.doHeader(ctx, method, path, in, out)
	return err
}

// doHeader is do, and returns the answer's header.
func (c *Client) doHeader(ctx context.Context, method, path string, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		// No HTML escaping: a task's "<" stays one byte, not six.
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(in); err != nil {
			return nil, err
		}
		body = &b
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://kith"+Prefix+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.wrapDial(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var e Error
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return resp.Header, fmt.Errorf("%s", e.Error)
		}
		return resp.Header, fmt.Errorf("daemon answered %s", resp.Status)
	}
	if out == nil {
		return resp.Header, nil
	}
	return resp.Header, json.NewDecoder(resp.Body).Decode(out)
}

func (c *Client) wrapDial(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w (socket %s)", ErrDaemonNotRunning, c.socket)
	}
	return err
}

// Node returns the daemon's identity and addresses.
func (c *Client) Node(ctx context.Context) (NodeInfo, error) {
	var n NodeInfo
	return n, c.do(ctx, http.MethodGet, "/node", nil, &n)
}

// Peers lists known peers.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var ps []Peer
	return ps, c.do(ctx, http.MethodGet, "/peers", nil, &ps)
}

// AddPeer adds a static peer by full multiaddr.
func (c *Client) AddPeer(ctx context.Context, addr, origin string) (Peer, error) {
	var p Peer
	return p, c.do(ctx, http.MethodPost, "/peers", AddPeer{Addr: addr, Origin: origin}, &p)
}

// Delegate starts a delegation.
func (c *Client) Delegate(ctx context.Context, r DelegateRequest) (string, error) {
	var out DelegateResponse
	return out.ID, c.do(ctx, http.MethodPost, "/delegations", r, &out)
}

// Delegation returns one delegation.
func (c *Client) Delegation(ctx context.Context, id string) (Delegation, error) {
	var d Delegation
	return d, c.do(ctx, http.MethodGet, "/delegations/"+url.PathEscape(id), nil, &d)
}

// Delegations lists delegations, newest last.
func (c *Client) Delegations(ctx context.Context) ([]Delegation, error) {
	ds, _, err := c.ListDelegations(ctx, ListQuery{})
	return ds, err
}

// ListDelegations lists the delegations q selects, newest last, and
// whether older matches were left out by q.Limit.
func (c *Client) ListDelegations(ctx context.Context, q ListQuery) (ds []Delegation, truncated bool, err error) {
	path := "/delegations"
	if v := q.Values(); len(v) > 0 {
		path += "?" + v.Encode()
	}
	h, err := c.doHeader(ctx, http.MethodGet, path, nil, &ds)
	return ds, h.Get(TruncatedHeader) == "true", err
}

// Tree returns the delegation trees.
func (c *Client) Tree(ctx context.Context) ([]TreeNode, error) {
	var t []TreeNode
	return t, c.do(ctx, http.MethodGet, "/tree", nil, &t)
}

// Reply answers the question of a delegation waiting for input, and
// returns the delegation as it is once the answer is stored.
func (c *Client) Reply(ctx context.Context, id, text string) (Delegation, error) {
	var out Delegation
	err := c.do(ctx, http.MethodPost, "/delegations/"+url.PathEscape(id)+"/reply", Reply{Text: text}, &out)
	return out, err
}

// Cancel cancels a delegation.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/delegations/"+url.PathEscape(id)+"/cancel", nil, nil)
}

// Verify re-checks a delegation's stored result proof.
func (c *Client) Verify(ctx context.Context, id string) (Proof, error) {
	var p Proof
	return p, c.do(ctx, http.MethodGet, "/delegations/"+url.PathEscape(id)+"/verify", nil, &p)
}

// maxEventLine is the longest event line Events reads: a status may
// carry as much output as a task (MaxTaskBytes), each byte JSON-escaped
// to at most six. A cap of 8 MiB failed `kith delegate` on a command that
// streamed 10 MiB of output in one status.
const maxEventLine = MaxDelegateBody

// Events follows a delegation's event stream, calling fn for each event,
// until the delegation is terminal, the stream ends or ctx is done.
func (c *Client) Events(ctx context.Context, id string, fn func(Event)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://kith"+Prefix+"/delegations/"+url.PathEscape(id)+"/events", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.wrapDial(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("daemon answered %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return fmt.Errorf("event stream: %w", err)
		}
		fn(ev)
		if ev.Terminal {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// ChangePeer sets a peer's trust or access, or forgets it.
func (c *Client) ChangePeer(ctx context.Context, id string, ch PeerChange) error {
	// POST for a removal too: DELETE has no body to carry the origin.
	return c.do(ctx, http.MethodPost, "/peers/"+url.PathEscape(id), ch, nil)
}

// Audit returns the audit log of trust and access changes, oldest first.
func (c *Client) Audit(ctx context.Context) ([]AuditEntry, error) {
	var out []AuditEntry
	return out, c.do(ctx, http.MethodGet, "/peers/log", nil, &out)
}

// GPU returns the daemon's GPU inventory and leases.
func (c *Client) GPU(ctx context.Context) (GPU, error) {
	var g GPU
	return g, c.do(ctx, http.MethodGet, "/gpu", nil, &g)
}

// Token returns the HTTP listener's bearer token; rotate replaces it first
// (the daemon uses the new one at once).
func (c *Client) Token(ctx context.Context, rotate bool) (Token, error) {
	var t Token
	method := http.MethodGet
	if rotate {
		method = http.MethodPost
	}
	return t, c.do(ctx, method, "/api-token", nil, &t)
}

// Reload has the daemon re-read its config file.
func (c *Client) Reload(ctx context.Context) (Reload, error) {
	var r Reload
	return r, c.do(ctx, http.MethodPost, "/reload", nil, &r)
}
