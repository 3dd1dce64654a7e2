package main

import (
	"strings"
	"testing"
)

// A large streamed output is cut on the status line (the result goes to
// stdout whole); a short one is shown as it is.
func TestPartialLine(t *testing.T) {
	if got := partialLine("hello"); got != `"hello"` {
		t.Fatalf("short partial: %s", got)
	}
	long := strings.Repeat("é", 200_000) // 400 KB, two bytes a rune
	got := partialLine(long)
	if len(got) > 200 || !strings.HasSuffix(got, "… (400000 bytes)") || strings.Contains(got, "\\x") {
		t.Fatalf("long partial shown as %d bytes: %.120s", len(got), got)
	}
}
