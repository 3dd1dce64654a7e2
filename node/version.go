package node

import (
	"runtime/debug"
	"strings"
	"time"
)

// baseVersion is the release this tree builds toward: a binary built from
// a checkout (go build, no module version) reports it with a -devel suffix.
const baseVersion = "0.1.0"

// Build says what this binary was built from, from the Go toolchain's
// build information (runtime/debug): the module version, the VCS revision
// and commit time, and whether the tree had uncommitted changes.
type Build struct {
	Version   string    `json:"version"`
	Revision  string    `json:"revision,omitempty"`
	Time      time.Time `json:"time,omitzero"` // the revision's commit time
	Modified  bool      `json:"modified,omitempty"`
	GoVersion string    `json:"go_version"`
}

// Version is this binary's version: the user agent, "kith version" and
// the API's NodeInfo carry it.
var Version = BuildInfo().Version

// BuildInfo reads the build information linked into this binary.
func BuildInfo() Build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Build{Version: baseVersion + "-devel"}
	}
	return buildFrom(bi)
}

func buildFrom(bi *debug.BuildInfo) Build {
	b := Build{GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time, _ = time.Parse(time.RFC3339, s.Value)
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	switch v := bi.Main.Version; {
	case v != "" && v != "(devel)" && !strings.HasPrefix(v, "v0.0.0-"):
		// A tagged release, or a pseudo-version on top of one.
		b.Version = strings.TrimPrefix(v, "v")
	default:
		// Untagged: the base version, and the revision when there is one.
		b.Version = baseVersion + "-devel"
		if b.Revision != "" {
			b.Version += "+" + b.Revision[:min(12, len(b.Revision))]
			if b.Modified {
				b.Version += ".dirty"
			}
		}
	}
	return b
}
