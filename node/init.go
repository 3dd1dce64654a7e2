package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/node/config"
)

// IdentityFile is the identity key's name inside the home directory.
const IdentityFile = "identity.key"

// Init errors; test with errors.Is.
var (
	// ErrAlreadyInitialized: Init found an identity in the home directory.
	ErrAlreadyInitialized = errors.New("node: home already holds an identity")
	// ErrInvalidConfig: Init would write, or would keep, a config that the
	// daemon refuses; it wrote nothing.
	ErrInvalidConfig = errors.New("node: config invalid")
	// ErrConfigExists: Init was given listen addresses for a config file
	// that already exists, which it never rewrites.
	ErrConfigExists = errors.New("node: config file already exists")
)

// ConfigPath is the config file of the node whose home is home.
func ConfigPath(home string) string { return filepath.Join(home, config.FileName) }

// Init creates a node's home: the directory (0700), a fresh identity and a
// commented default config.toml listening on listen (the defaults when
// empty). An existing config.toml is kept, and must then be valid; listen
// is an error with it (ErrConfigExists), since it would be ignored. Before
// it writes anything it checks the config it would leave behind, with the
// daemon's own rules: a config the daemon would refuse fails here
// (ErrInvalidConfig) and leaves the home as it was. It refuses to touch a
// home that already has an identity (ErrAlreadyInitialized).
func Init(home string, listen []string) (peer.ID, error) {
	keyPath := filepath.Join(home, IdentityFile)
	cfgPath := ConfigPath(home)
	if crypto.IdentityExists(keyPath) {
		return "", fmt.Errorf("%w: %s (kith init never replaces a node's identity; to change the config, edit %s and check it with \"kith daemon --check\"; to start over as a new node, move %s away first)",
			ErrAlreadyInitialized, keyPath, cfgPath, keyPath)
	}
	_, statErr := os.Stat(cfgPath)
	writeCfg := errors.Is(statErr, os.ErrNotExist)
	switch {
	case writeCfg:
		d := config.Default()
		if len(listen) > 0 {
			d.Listen = listen
		}
		if err := d.Validate(); err != nil {
			return "", fmt.Errorf("%w (listen addresses are multiaddrs such as /ip4/0.0.0.0/tcp/4001 or /ip4/0.0.0.0/udp/4001/quic-v1); nothing was written:\n%w", ErrInvalidConfig, err)
		}
		// The file as written must load back as the daemon reads it.
		if _, err := config.Parse(config.DefaultFile(listen)); err != nil {
			return "", fmt.Errorf("%w; nothing was written:\n%w", ErrInvalidConfig, err)
		}
	case len(listen) > 0:
		return "", fmt.Errorf("%w: %s; it keeps its own listen addresses: edit its listen key instead of passing --listen (and check it with \"kith daemon --check\"); nothing was written",
			ErrConfigExists, cfgPath)
	default:
		if _, err := config.Load(cfgPath); err != nil {
			return "", fmt.Errorf("%w: %s already exists and the daemon would refuse it; fix it (kith daemon --check lists every problem) or move it away, then run kith init again; nothing was written:\n%w",
				ErrInvalidConfig, cfgPath, err)
		}
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return "", fmt.Errorf("node: create home: %w", err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		return "", fmt.Errorf("node: home permissions: %w", err)
	}
	id, err := crypto.GenerateIdentity()
	if err != nil {
		return "", err
	}
	if err := id.Save(keyPath); err != nil {
		return "", err
	}
	if _, err := EnsureToken(home); err != nil {
		return "", err
	}
	if writeCfg {
		if err := os.WriteFile(cfgPath, config.DefaultFile(listen), 0o600); err != nil {
			return "", fmt.Errorf("node: write config: %w", err)
		}
	}
	return id.PeerID(), nil
}

// PeerIDOffline reads the peer ID from the home's identity key, for "kith
// id" while no daemon runs.
func PeerIDOffline(home string) (peer.ID, error) {
	id, err := readIdentity(home)
	if err != nil {
		return "", err
	}
	return id.PeerID(), nil
}

// readIdentity reads the node's identity key, with an error that says what
// to do about it: "run kith init" only where that would help.
func readIdentity(home string) (*crypto.Identity, error) {
	path := filepath.Join(home, IdentityFile)
	id, err := crypto.LoadIdentity(path)
	switch {
	case err == nil:
		return id, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w (this home has no identity yet: run \"kith init\", or \"kith daemon\", which creates one)", err)
	case errors.Is(err, crypto.ErrKeyPermissions):
		return nil, err // it says how to fix the mode
	default:
		return nil, fmt.Errorf("%w (this file is the node's identity, its peer ID: restore it from a backup; to start over as a new node, move it away and run \"kith init\")", err)
	}
}

// LoadConfig reads <home>/config.toml, or returns the defaults when there
// is none.
func LoadConfig(home string) (config.Config, error) {
	path := ConfigPath(home)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return config.Default(), nil
	}
	return config.Load(path)
}
