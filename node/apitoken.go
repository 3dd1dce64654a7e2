package node

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is the HTTP listener's bearer token inside the home directory
// (mode 0600).
const TokenFile = "api.token"

// tokenPrefix marks kith tokens, so one found in a log or a paste is
// recognisable (and secret scanners can match it).
const tokenPrefix = "kith_"

// newToken returns 32 random bytes as base64url text with tokenPrefix.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// EnsureToken returns the home's API token, creating it when there is none.
func EnsureToken(home string) (string, error) {
	t, err := ReadToken(home)
	if err == nil {
		return t, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	return RotateToken(home)
}

// ReadToken reads the home's API token.
func ReadToken(home string) (string, error) {
	b, err := os.ReadFile(filepath.Join(home, TokenFile))
	if err != nil {
		return "", fmt.Errorf("node: api token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 16 {
		return "", fmt.Errorf("node: api token in %s is too short; rotate it with kith api token --rotate", filepath.Join(home, TokenFile))
	}
	return t, nil
}

// RotateToken writes a fresh API token (mode 0600, replaced atomically)
// and returns it. A running daemon must be told (kith api token --rotate
// does it through the socket); until then it keeps the old one.
func RotateToken(home string) (string, error) {
	t := newToken()
	path := filepath.Join(home, TokenFile)
	tmp, err := os.CreateTemp(home, ".api.token-*")
	if err != nil {
		return "", fmt.Errorf("node: api token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", fmt.Errorf("node: api token: %w", err)
	}
	if _, err := tmp.WriteString(t + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("node: api token: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("node: api token: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("node: api token: %w", err)
	}
	return t, nil
}

// tokenMatches compares in constant time (for equal lengths; the length of
// a kith token is no secret).
func tokenMatches(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
