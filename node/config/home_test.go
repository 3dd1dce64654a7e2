package config

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHomeDirPrecedence(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                string
		flag, kithHome, xdg string
		home                string
		want                string
	}{
		{"flag wins", "/opt/kith", "/srv/kith", "/xdg", "/home/u", "/opt/kith"},
		{"relative flag made absolute", "nodes/a", "/srv/kith", "", "/home/u", filepath.Join(cwd, "nodes/a")},
		{"KITH_HOME over XDG", "", "/srv/kith", "/xdg", "/home/u", "/srv/kith"},
		{"relative KITH_HOME made absolute", "", "kh", "/xdg", "/home/u", filepath.Join(cwd, "kh")},
		{"XDG_DATA_HOME", "", "", "/xdg", "/home/u", "/xdg/kith"},
		{"relative XDG_DATA_HOME ignored", "", "", "xdg", "/home/u", "/home/u/.local/share/kith"},
		{"home fallback", "", "", "", "/home/u", "/home/u/.local/share/kith"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KITH_HOME", tt.kithHome)
			t.Setenv("XDG_DATA_HOME", tt.xdg)
			t.Setenv("HOME", tt.home)
			got, err := HomeDir(tt.flag)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("HomeDir(%q) = %q, want %q", tt.flag, got, tt.want)
			}
		})
	}
}

func TestHomeDirWithoutAnyHome(t *testing.T) {
	t.Setenv("KITH_HOME", "")
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "")
	if got, err := HomeDir(""); err == nil {
		t.Fatalf("HomeDir with no home at all = %q, want an error", got)
	}
}
