package node

import (
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
)

// ReloadReport says what a reload changed on the running node and which
// changed keys take effect only after a restart.
type ReloadReport struct {
	Applied     []string // changed keys now in effect
	NeedRestart []string // changed keys a restart applies
}

// liveKeys are the keys a reload applies to the running node.
var liveKeys = []string{"log_level", "peers", "policy.mode", "profiles"}

// Reload re-reads the config file (with the daemon's flag overrides,
// Options.Override) and applies what can change live: profiles, the
// policy's mode, new static peers and the log level. Every other changed
// key is reported as needing a restart; nothing is applied when the file
// is invalid.
func (n *Node) Reload() (ReloadReport, error) {
	cfg, err := LoadConfig(n.home)
	if err != nil {
		return ReloadReport{}, err
	}
	if n.opts.Override != nil {
		n.opts.Override(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return ReloadReport{}, err
	}
	profs, err := profiles(cfg)
	if err != nil {
		return ReloadReport{}, err
	}
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	old := n.cfg
	if n.live != nil {
		old = *n.live
	}
	var rep ReloadReport
	for _, k := range changedKeys(old, cfg) {
		if slices.Contains(liveKeys, k) {
			rep.Applied = append(rep.Applied, k)
		} else {
			rep.NeedRestart = append(rep.NeedRestart, k)
		}
	}
	if slices.Contains(rep.Applied, "profiles") {
		if err := n.Engine().SetProfiles(profs); err != nil {
			return ReloadReport{}, err
		}
	}
	if slices.Contains(rep.Applied, "policy.mode") {
		n.gater.allowlist.Store(cfg.Policy.Mode == config.PolicyAllowlist)
		for _, p := range n.Host().Network().Peers() {
			if !n.gater.admits(p) {
				_ = n.Host().Network().ClosePeer(p)
			}
		}
	}
	if slices.Contains(rep.Applied, "peers") {
		for _, a := range cfg.Peers {
			if slices.Contains(old.Peers, a) {
				continue
			}
			if err := addConfigPeer(n.Store(), a); err != nil {
				n.log.Warn("static peer", "addr", a, "err", err)
				continue
			}
			if ai, err := peer.AddrInfoFromString(a); err == nil {
				n.connectNow(*ai)
			}
		}
		// A peer dropped from the list stays known (with its trust), as
		// one dropped while the node was stopped does.
	}
	if slices.Contains(rep.Applied, "log_level") && n.opts.LogLevel != nil {
		n.opts.LogLevel.Set(cfg.LogLevel.Slog())
	}
	// What needs a restart is not applied: the next reload compares
	// against what runs, so it names those keys again.
	applied := old
	applied.Profiles, applied.Policy.Mode, applied.Peers, applied.LogLevel = cfg.Profiles, cfg.Policy.Mode, cfg.Peers, cfg.LogLevel
	n.live = &applied
	n.log.Info("config reloaded", "applied", strings.Join(rep.Applied, ","), "need_restart", strings.Join(rep.NeedRestart, ","))
	return rep, nil
}

// changedKeys lists the keys whose values differ between a and b: the
// top-level keys, and each key of a table ("policy.mode"); profiles count
// as one key.
func changedKeys(a, b config.Config) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	t := va.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		fa, fb := va.Field(i), vb.Field(i)
		if f.Type.Kind() != reflect.Struct {
			if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
				out = append(out, name)
			}
			continue
		}
		for j := range f.Type.NumField() {
			sub, _, _ := strings.Cut(f.Type.Field(j).Tag.Get("toml"), ",")
			if !reflect.DeepEqual(fa.Field(j).Interface(), fb.Field(j).Interface()) {
				out = append(out, name+"."+sub)
			}
		}
	}
	return out
}

// handleReload is POST /reload on the unix socket: only the node's own
// user may reload it.
func (n *Node) handleReload(w http.ResponseWriter, _ *http.Request) {
	rep, err := n.Reload()
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Reload{Applied: rep.Applied, NeedRestart: rep.NeedRestart})
}
