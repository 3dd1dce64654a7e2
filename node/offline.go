package node

import (
	"context"
	"path/filepath"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
)

// Offline answers, for a home whose daemon is not running, the API
// client's calls that make sense without one: the same methods, with the
// same request and answer types, read from (or written to) the home's key,
// store and config directly. The CLI falls back to it on
// api.ErrDaemonNotRunning.
type Offline struct {
	home string
	cfg  config.Config
}

// NewOffline loads the home's config; it opens nothing yet.
func NewOffline(home string) (*Offline, error) {
	cfg, err := LoadConfig(home)
	if err != nil {
		return nil, err
	}
	return &Offline{home: home, cfg: cfg}, nil
}

// Node is the peer ID from the key; there are no addresses without a
// running host.
func (o *Offline) Node(context.Context) (api.NodeInfo, error) {
	p, err := PeerIDOffline(o.home)
	if err != nil {
		return api.NodeInfo{}, err
	}
	return api.NodeInfo{PeerID: p.String(), Addrs: []string{}, Version: Version}, nil
}

// ChangePeer makes the change in the store, audited with origin
// "<origin> (daemon stopped)"; it holds when the daemon starts.
func (o *Offline) ChangePeer(_ context.Context, id string, ch api.PeerChange) error {
	p, err := ParsePeerID(id)
	if err != nil {
		return err
	}
	pc := PeerChange{Peer: p, Trust: ch.Trust, Access: ch.Access, Remove: ch.Remove, Origin: ch.Origin + " (daemon stopped)"}
	return pc.ApplyOffline(o.home, o.cfg)
}

// Audit reads the audit log from the store.
func (o *Offline) Audit(context.Context) ([]api.AuditEntry, error) {
	return AuditOffline(o.home, o.cfg, 1000)
}

// GPU asks NVML (or the config's declared VRAM) directly; no leases are
// held without a daemon.
func (o *Offline) GPU(context.Context) (api.GPU, error) { return GPUReport(o.cfg), nil }

// IdentityExists reports whether the home has an identity key.
func IdentityExists(home string) bool {
	return crypto.IdentityExists(filepath.Join(home, IdentityFile))
}
