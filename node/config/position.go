package config

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// keyIndex finds the lines of a document's keys, so that a validation
// problem about "profiles[1].command" can point at the line that set it.
// go-toml reports lines only for decode errors, so this is a light scan of
// the common shapes (headers, `key = value` lines, multi-line strings), not
// a TOML parser: where it is unsure it knows nothing, and errors then come
// without a line rather than with a wrong one.
type keyIndex struct {
	lines   map[string]int // key with indexes → first line that set it
	entries []indexEntry   // in document order
}

type indexEntry struct {
	line   int
	key    string // full key with indexes, or the table for a header
	value  string // the text after "=" on the key's line
	header bool
}

var (
	headerRe  = regexp.MustCompile(`^\[\[?\s*([A-Za-z0-9_-]+(?:\s*\.\s*[A-Za-z0-9_-]+)*)\s*\]\]?\s*(?:#.*)?$`)
	keyLineRe = regexp.MustCompile(`^([A-Za-z0-9_-]+(?:\s*\.\s*[A-Za-z0-9_-]+)*)\s*=\s*(.*)$`)
)

const unknownTable = "\x00"

func indexKeys(doc []byte) keyIndex {
	idx := keyIndex{lines: make(map[string]int)}
	table := ""
	counts := make(map[string]int) // array table → entries so far
	inString := ""                 // the delimiter of an open multi-line string
	for n, raw := range bytes.Split(doc, []byte("\n")) {
		line := n + 1
		s := strings.TrimSpace(string(raw))
		if inString != "" {
			if strings.Count(s, inString)%2 == 1 {
				inString = ""
			}
			continue
		}
		if s == "" || s[0] == '#' {
			continue
		}
		if m := headerRe.FindStringSubmatch(s); m != nil {
			name := removeSpaces(m[1])
			if strings.HasPrefix(s, "[[") {
				table = fmt.Sprintf("%s[%d]", name, counts[name])
				counts[name]++
			} else {
				table = name
			}
			idx.add(indexEntry{line: line, key: table, header: true})
			continue
		}
		if s[0] == '[' {
			// A header this scan cannot read (quoted names): the keys
			// below it are in a table it does not know, until the next.
			table = unknownTable
			idx.entries = append(idx.entries, indexEntry{line: line, header: true})
			continue
		}
		m := keyLineRe.FindStringSubmatch(s)
		if m == nil || table == unknownTable {
			continue // a continuation line, or a shape this scan does not know
		}
		key := removeSpaces(m[1])
		if table != "" {
			key = table + "." + key
		}
		idx.add(indexEntry{line: line, key: key, value: m[2]})
		for _, delim := range []string{`"""`, `'''`} {
			if strings.HasPrefix(m[2], delim) && strings.Count(m[2], delim)%2 == 1 {
				inString = delim
			}
		}
	}
	return idx
}

func (idx *keyIndex) add(e indexEntry) {
	idx.entries = append(idx.entries, e)
	if _, ok := idx.lines[e.key]; !ok {
		idx.lines[e.key] = e.line
	}
}

// repeated returns the second entry that sets a key ending in leaf: go-toml
// reports a key set twice by its last part only, and without a line.
func (idx keyIndex) repeated(leaf string) (indexEntry, bool) {
	seen := make(map[string]bool)
	for _, e := range idx.entries {
		if e.key != leaf && !strings.HasSuffix(e.key, "."+leaf) {
			continue
		}
		if seen[e.key] {
			return e, true
		}
		seen[e.key] = true
	}
	return indexEntry{}, false
}

// lineOf returns the line of key or, failing that, of the nearest enclosing
// key or table that the document has: "profiles[1].command" falls back to
// the [[profiles]] header when the profile has no command. 0 if none.
func (idx keyIndex) lineOf(key string) int {
	for key != "" {
		if line, ok := idx.lines[key]; ok {
			return line
		}
		if line, ok := idx.lines[key+"[0]"]; ok {
			return line // an array of tables where a table was expected
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}

// keyAt returns the key whose value spans line: the key set on that line,
// or on the nearest line above it when the value continues over several
// lines. "" when the line belongs to no key the scan recognised.
func (idx keyIndex) keyAt(line int) string {
	// Entries are in line order; find the last one at or above line.
	i := sort.Search(len(idx.entries), func(i int) bool { return idx.entries[i].line > line }) - 1
	if i < 0 {
		return ""
	}
	if e := idx.entries[i]; !e.header || e.line == line {
		return e.key
	}
	return "" // a header above the line, but no key: not a line the scan knows
}

var indexRe = regexp.MustCompile(`\[\d+\]`)

// stripIndexes turns "profiles[1].command" into "profiles.command".
func stripIndexes(key string) string { return indexRe.ReplaceAllString(key, "") }

func removeSpaces(s string) string { return strings.Join(strings.Fields(s), "") }
