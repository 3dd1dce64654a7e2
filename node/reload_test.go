package node

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kithmesh/kith/node/config"
)

func TestChangedKeys(t *testing.T) {
	a := config.Default()
	if got := changedKeys(a, config.Default()); len(got) != 0 {
		t.Errorf("changedKeys of two defaults = %q, want none", got)
	}
	b := config.Default()
	b.Listen = nil
	b.Policy.Mode = config.PolicyAllowlist
	b.Limits.MaxRemoteConcurrent++
	b.Profiles = append(b.Profiles, config.Profile{Name: "x", Executor: config.ExecutorEcho})
	want := []string{"listen", "limits.max_remote_concurrent", "policy.mode", "profiles"}
	if got := changedKeys(a, b); !slices.Equal(got, want) {
		t.Errorf("changedKeys = %q, want %q", got, want)
	}
	for _, k := range want {
		if live := slices.Contains(liveKeys, k); live != (k == "policy.mode" || k == "profiles") {
			t.Errorf("key %s: live = %v", k, live)
		}
	}
}

// The config reference (docs/config.md, generated in node/config, which
// cannot import this package) marks exactly the keys Reload applies live.
func TestReferenceMarksLiveKeys(t *testing.T) {
	b, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, k := range liveKeys {
		heading := "### `" + k + "`\n\n"
		if k == "profiles" {
			heading = "## `[[profiles]]`\n\n"
		}
		i := strings.Index(doc, heading)
		if i < 0 {
			t.Errorf("docs/config.md has no section %q", strings.TrimSpace(heading))
			continue
		}
		line, _, _ := strings.Cut(doc[i+len(heading):], "\n")
		if !strings.Contains(line, "*live*") {
			t.Errorf("docs/config.md does not mark %s live: %q", k, line)
		}
	}
	if n := strings.Count(doc, "· *live*"); n != len(liveKeys)-1+strings.Count(doc, "### `profiles.") {
		t.Errorf("docs/config.md marks %d keys live; want the live keys and every profiles key", n)
	}
}
