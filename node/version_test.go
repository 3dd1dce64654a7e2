package node

import (
	"runtime/debug"
	"testing"
	"time"
)

func TestBuildFrom(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-22T15:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	tests := []struct {
		name     string
		main     string
		settings []debug.BuildSetting
		want     string
	}{
		{"tagged module", "v0.2.0", nil, "0.2.0"},
		{"go build in a checkout", "(devel)", vcs, baseVersion + "-devel+0123456789ab.dirty"},
		{"untagged pseudo-version", "v0.0.0-20261122150000-0123456789ab+dirty", vcs, baseVersion + "-devel+0123456789ab.dirty"},
		{"no VCS stamp", "(devel)", nil, baseVersion + "-devel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := buildFrom(&debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: tt.main}, Settings: tt.settings})
			if b.Version != tt.want {
				t.Errorf("Version = %q, want %q", b.Version, tt.want)
			}
			if tt.settings != nil && (!b.Modified || !b.Time.Equal(time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC)) || len(b.Revision) != 40) {
				t.Errorf("build %+v: want the revision, its time and modified", b)
			}
		})
	}
}
