package config

import (
	"fmt"
	"os"
	"path/filepath"
)

// HomeDir returns the node's home directory ($KITH_HOME), which holds
// config.toml, the identity key, the database and the API socket. The first
// of these that is set wins:
//
//  1. flag, the --home flag;
//  2. the KITH_HOME environment variable;
//  3. $XDG_DATA_HOME/kith, when XDG_DATA_HOME is an absolute path (the XDG
//     base directory spec says to ignore a relative one);
//  4. ~/.local/share/kith.
//
// A relative flag or KITH_HOME is made absolute against the working
// directory, so that the path stays right if the daemon changes directory.
// HomeDir does not create the directory.
func HomeDir(flag string) (string, error) {
	if flag != "" {
		return absHome("--home", flag)
	}
	if env := os.Getenv("KITH_HOME"); env != "" {
		return absHome("KITH_HOME", env)
	}
	if xdg := os.Getenv("XDG_DATA_HOME"); xdg != "" && filepath.IsAbs(xdg) {
		return filepath.Join(xdg, "kith"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for kith: set --home or KITH_HOME: %w", err)
	}
	return filepath.Join(home, ".local", "share", "kith"), nil
}

func absHome(from, p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("home directory from %s: %w", from, err)
	}
	return abs, nil
}
