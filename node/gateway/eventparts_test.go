package gateway

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// eventParts cuts a large output into updates of at most maxEventText
// bytes whose texts, joined in order, are the output, each piece valid
// UTF-8; an output within the limit stays one update with its own parts.
func TestEventParts(t *testing.T) {
	small := a2a.ContentParts{a2a.NewTextPart("hello"), a2a.NewTextPart(" world")}
	if got := eventParts(small); len(got) != 1 || len(got[0]) != 2 || got[0][0] != small[0] {
		t.Fatalf("small output in %d updates", len(got))
	}

	// Two-byte runes, so that a cut at maxEventText falls inside one.
	big := strings.Repeat("é", maxEventText) + "tail" // 2×maxEventText+4 bytes
	file := a2a.NewRawPart(make([]byte, maxEventText/2))
	got := eventParts(a2a.ContentParts{a2a.NewTextPart("head "), a2a.NewTextPart(big), file})
	var joined strings.Builder
	files := 0
	for i, parts := range got {
		size := 0
		for _, p := range parts {
			if p.Raw() != nil {
				files++
				size += len(p.Raw()) * 4 / 3
				continue
			}
			if !utf8.ValidString(p.Text()) {
				t.Fatalf("update %d: a piece cut inside a rune", i)
			}
			joined.WriteString(p.Text())
			size += len(p.Text())
		}
		if size > maxEventText {
			t.Fatalf("update %d carries %d bytes, more than %d", i, size, maxEventText)
		}
	}
	if joined.String() != "head "+big || files != 1 {
		t.Fatalf("updates joined to %d bytes of text and %d files, want %d and 1", joined.Len(), files, len("head "+big))
	}
	if len(got) < 3 {
		t.Fatalf("%d updates for %d bytes", len(got), len(big))
	}
}

// A stream's first event leaves out a history or an output larger than an
// event should be, and only those; the task itself is left as it was.
func TestLean(t *testing.T) {
	msg := func(s string) *a2a.Message { return a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(s)) }
	art := func(s string) []*a2a.Artifact {
		return []*a2a.Artifact{{ID: outputArtifact, Parts: a2a.ContentParts{a2a.NewTextPart(s)}}}
	}
	small := &a2a.Task{History: []*a2a.Message{msg("hi")}, Artifacts: art("hi")}
	if lean(small) != small {
		t.Fatal("a small task was changed")
	}
	big := strings.Repeat("x", maxEventText+1)
	task := &a2a.Task{History: []*a2a.Message{msg(big)}, Artifacts: art("out")}
	l := lean(task)
	if l.History != nil || len(l.Artifacts) != 1 || len(task.History) != 1 {
		t.Fatalf("large history: lean kept %d messages and %d artifacts, the task now has %d messages", len(l.History), len(l.Artifacts), len(task.History))
	}
	task = &a2a.Task{History: []*a2a.Message{msg("in")}, Artifacts: art(big)}
	if l := lean(task); len(l.History) != 1 || l.Artifacts != nil {
		t.Fatalf("large output: lean kept %d messages and %d artifacts", len(l.History), len(l.Artifacts))
	}
}
