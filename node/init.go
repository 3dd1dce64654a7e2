package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/node/config"
)

// IdentityFile is the identity key's name inside the home directory.
const IdentityFile = "identity.key"

// ErrAlreadyInitialized: Init found an identity in the home directory.
var ErrAlreadyInitialized = errors.New("node: home already holds an identity")

// Init creates a node's home: the directory (0700), a fresh identity and a
// commented default config.toml listening on listen (the defaults when
// empty). It refuses to touch a home that already has an identity.
func Init(home string, listen []string) (peer.ID, error) {
	keyPath := filepath.Join(home, IdentityFile)
	if crypto.IdentityExists(keyPath) {
		return "", fmt.Errorf("%w: %s", ErrAlreadyInitialized, keyPath)
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
	cfgPath := filepath.Join(home, config.FileName)
	if _, err := os.Stat(cfgPath); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(cfgPath, config.DefaultFile(listen), 0o600); err != nil {
			return "", fmt.Errorf("node: write config: %w", err)
		}
	}
	return id.PeerID(), nil
}

// LoadConfig reads <home>/config.toml, or returns the defaults when there
// is none.
func LoadConfig(home string) (config.Config, error) {
	path := filepath.Join(home, config.FileName)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return config.Default(), nil
	}
	return config.Load(path)
}
