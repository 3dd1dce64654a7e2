package node

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
	"github.com/kithmesh/kith/store"
)

// PeerChange is one change to a peer's standing: trust, access, or
// forgetting it. The same change applies to a running daemon (through its
// API) or, while none runs, to the store directly.
type PeerChange struct {
	Peer   peer.ID
	Trust  *protocol.TrustLevel // set trust
	Access *store.Access        // set allow/deny/none
	Remove bool                 // forget the peer
	Origin string               // who asked, for the audit log
}

// NamedPeerTrust is the trust a peer gets when the user names it: "kith
// peers add" (or the config's peers) and "kith peers allow" raise it to
// this level, never lower it, and leave a denied peer denied. Peers that
// discovery found (mDNS, DNS-SD, the DHT, gossip) stay untrusted until the
// user says otherwise; profiles other than echo need this level by default
// (config.Profile.MinTrust), so a stranger on the LAN cannot use them.
const NamedPeerTrust = protocol.Verified

// ErrPeerRefused: a delegation names a peer this node's policy refuses to
// connect to, so it could never reach it.
var ErrPeerRefused = errors.New("peer refused by this node's policy")

// reachable says why this node's own gater would refuse to connect to p,
// before a delegation to p is stored and tried.
func (n *Node) reachable(p peer.ID) error {
	switch {
	case n.gater.denied(p):
		return fmt.Errorf("%w: %s is denied (kith peers deny); \"kith peers allow %s\" lifts the deny", ErrPeerRefused, p, p)
	case !n.gater.admits(p):
		return fmt.Errorf("%w: %s is not allowed and policy.mode is allowlist; \"kith peers allow %s\" admits it", ErrPeerRefused, p, p)
	}
	return nil
}

// ParsePeerID parses a peer ID with an error that says what was wrong.
func ParsePeerID(s string) (peer.ID, error) {
	p, err := peer.Decode(s)
	if err != nil {
		return "", fmt.Errorf("%q is not a peer ID (want the 12D3KooW... form that kith id prints): %w", s, err)
	}
	return p, nil
}

// ApplyToStore makes the change in st: every trust or access change goes
// to the audit log in the same transaction.
func (c PeerChange) ApplyToStore(st *store.Store) error {
	switch {
	case c.Remove:
		return st.DeletePeer(c.Peer, c.Origin)
	case c.Trust != nil:
		return st.SetTrust(c.Peer, *c.Trust, c.Origin)
	case c.Access != nil:
		if err := st.SetAccess(c.Peer, *c.Access, c.Origin); err != nil {
			return err
		}
		if *c.Access == store.AccessAllow {
			_, err := st.RaiseTrust(c.Peer, NamedPeerTrust, c.Origin)
			return err
		}
		return nil
	}
	return errors.New("node: empty peer change")
}

// ApplyOffline opens the store of a stopped node and makes the change.
func (c PeerChange) ApplyOffline(home string, cfg config.Config) error {
	st, err := store.Open(cfg.StorePath(home), store.Options{})
	if err != nil {
		return fmt.Errorf("%w (is a daemon running on this home?)", err)
	}
	return errors.Join(c.ApplyToStore(st), st.Close())
}

// AuditOffline reads the audit log of a stopped node.
func AuditOffline(home string, cfg config.Config, limit int) ([]api.AuditEntry, error) {
	st, err := store.Open(cfg.StorePath(home), store.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return auditLog(st, limit)
}

func auditLog(st *store.Store, limit int) ([]api.AuditEntry, error) {
	entries, err := st.AuditLog(limit)
	if err != nil {
		return nil, err
	}
	out := []api.AuditEntry{}
	for _, e := range entries {
		out = append(out, api.AuditEntry{Seq: e.Seq, At: e.At, Peer: e.Peer.String(), Action: e.Action, From: e.From, To: e.To, Origin: e.Origin})
	}
	return out, nil
}

// applyLive makes a change on the running node: store (audited), then the
// connection gater, and a peer that may no longer connect is disconnected
// at once.
func (n *Node) applyLive(c PeerChange) error {
	if err := c.ApplyToStore(n.Store()); err != nil {
		return err
	}
	access := store.AccessNone
	if rec, err := n.Store().GetPeer(c.Peer); err == nil {
		access = rec.Access
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	n.gater.set(c.Peer, access)
	if !n.gater.admits(c.Peer) {
		if err := n.Host().Network().ClosePeer(c.Peer); err != nil {
			n.log.Warn("close connections of refused peer", "peer", c.Peer, "err", err)
		}
		n.log.Info("peer refused", "peer", c.Peer, "access", access, "origin", c.Origin)
	}
	return nil
}

func (n *Node) handlePeerChange(w http.ResponseWriter, r *http.Request) {
	p, err := ParsePeerID(r.PathValue("id"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	var req api.PeerChange
	if r.Method == http.MethodDelete {
		req.Remove = true
	} else if !decodeBody(w, r, &req) {
		return
	}
	c := PeerChange{Peer: p, Remove: req.Remove, Origin: "api"}
	if req.Origin != "" {
		c.Origin = req.Origin
	}
	// The body decoded the levels themselves (a bad name is a 400 there).
	c.Trust, c.Access = req.Trust, req.Access
	switch {
	case req.Trust != nil, req.Access != nil:
	case !req.Remove:
		writeErr(w, http.StatusBadRequest, errors.New("say trust, access or remove"))
		return
	}
	if err := n.applyLive(c); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, store.ErrNotFound) {
			code = http.StatusNotFound
		}
		writeErr(w, code, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (n *Node) handleAudit(w http.ResponseWriter, _ *http.Request) {
	out, err := auditLog(n.Store(), 1000)
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
