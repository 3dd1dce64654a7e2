package config

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// keyIndex knows where a document sets each key, so that a problem about
// "profiles[1].command" can point at the line and column that set it, and
// an error go-toml reports at a position can name its key. It is built
// from go-toml's own parser (unstable.Parser), so it reads the document
// exactly as decoding does: quoted and dotted keys, inline tables, arrays
// of tables and multi-line strings included. After a syntax error it knows
// the keys before it.
type keyIndex struct {
	at      map[string]position // key with indexes → where its value (or header) starts
	keys    map[string]position // key with indexes → where the key itself starts
	entries []indexEntry        // in document order
	// repeats are the keys the document sets twice, which go-toml reports
	// by their last part only and without a position.
	repeats []*KeyError
	// table is the [table] the parser was in when it stopped, with indexes.
	table string
}

type position struct{ line, col int }

type indexEntry struct {
	key    string // full key with indexes: "profiles[1].command", "listen[2]"
	offset int    // where the key (or the header, or the array element) starts
}

func indexKeys(doc []byte) keyIndex {
	ix := &indexer{
		idx:    keyIndex{at: make(map[string]position), keys: make(map[string]position)},
		counts: make(map[string]int),
		tables: make(map[string]bool),
	}
	ix.p.Reset(doc)
	for ix.p.NextExpression() {
		e := ix.p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			ix.header(e)
		case unstable.KeyValue:
			ix.keyValue(ix.table, e)
		}
	}
	ix.idx.table = ix.table
	return ix.idx
}

type indexer struct {
	p      unstable.Parser
	idx    keyIndex
	table  string          // the current [table] with indexes, "" at the top
	counts map[string]int  // array table (without indexes) → entries so far
	tables map[string]bool // [table] headers seen
}

func (ix *indexer) pos(r unstable.Range) (position, int) {
	s := ix.p.Shape(r)
	return position{s.Start.Line, s.Start.Column}, s.Start.Offset
}

// keyPath reads a key node's parts and where the key starts.
func (ix *indexer) keyPath(it unstable.Iterator) ([]string, unstable.Range) {
	var parts []string
	var first unstable.Range
	for it.Next() {
		n := it.Node()
		if len(parts) == 0 {
			first = n.Raw
		}
		parts = append(parts, string(n.Data))
	}
	return parts, first
}

// resolve joins a header's parts, naming the current entry of every
// array table on the way: "profiles" becomes "profiles[2]" in the third
// [[profiles]].
func (ix *indexer) resolve(parts []string) string {
	key := ""
	for _, p := range parts {
		if key != "" {
			key += "."
		}
		key += p
		if n := ix.counts[stripIndexes(key)]; n > 0 {
			key = fmt.Sprintf("%s[%d]", key, n-1)
		}
	}
	return key
}

func (ix *indexer) header(e *unstable.Node) {
	parts, r := ix.keyPath(e.Key())
	if len(parts) == 0 {
		return
	}
	p, off := ix.pos(r)
	if e.Kind == unstable.ArrayTable {
		parent := ix.resolve(parts[:len(parts)-1])
		name := parts[len(parts)-1]
		if parent != "" {
			name = parent + "." + name
		}
		bare := stripIndexes(name)
		ix.table = fmt.Sprintf("%s[%d]", name, ix.counts[bare])
		ix.counts[bare]++
	} else {
		ix.table = ix.resolve(parts)
		if ix.tables[ix.table] {
			ix.repeat(ix.table, p)
		}
		ix.tables[ix.table] = true
	}
	ix.add(ix.table, p, p, off)
}

func (ix *indexer) keyValue(prefix string, e *unstable.Node) {
	parts, r := ix.keyPath(e.Key())
	if len(parts) == 0 {
		return
	}
	key := strings.Join(parts, ".")
	if prefix != "" {
		key = prefix + "." + key
	}
	kp, off := ix.pos(r)
	if _, dup := ix.idx.at[key]; dup {
		ix.repeat(key, kp)
	}
	// The entry's position is its value's: that is what is wrong when a
	// value is.
	ix.add(key, kp, ix.valuePos(e.Value(), kp), off)
	ix.value(key, e.Value())
}

// value indexes what an inline table or an array holds.
func (ix *indexer) value(key string, v *unstable.Node) {
	switch v.Kind {
	case unstable.InlineTable:
		for it := v.Children(); it.Next(); {
			if kv := it.Node(); kv.Kind == unstable.KeyValue {
				ix.keyValue(key, kv)
			}
		}
	case unstable.Array:
		i := 0
		for it := v.Children(); it.Next(); i++ {
			el := it.Node()
			ek := fmt.Sprintf("%s[%d]", key, i)
			p := ix.valuePos(el, ix.idx.at[key])
			ix.add(ek, p, p, ix.offsetOf(p))
			ix.value(ek, el)
		}
	}
}

// valuePos is where a value starts; def when go-toml's parser did not keep
// it (booleans keep only their text, arrays nothing).
func (ix *indexer) valuePos(v *unstable.Node, def position) position {
	switch {
	case v.Raw.Length > 0:
		p, _ := ix.pos(v.Raw)
		return p
	case v.Kind == unstable.Bool && len(v.Data) > 0:
		p, _ := ix.pos(ix.p.Range(v.Data))
		return p
	case v.Kind == unstable.Array:
		if it := v.Children(); it.Next() {
			return ix.valuePos(it.Node(), def)
		}
	}
	return def
}

func (ix *indexer) offsetOf(p position) int { return offsetAt(ix.p.Data(), p.line, p.col) }

func (ix *indexer) add(key string, kp, vp position, offset int) {
	ix.idx.entries = append(ix.idx.entries, indexEntry{key: key, offset: offset})
	if _, ok := ix.idx.at[key]; !ok {
		ix.idx.at[key], ix.idx.keys[key] = vp, kp
	}
}

func (ix *indexer) repeat(key string, p position) {
	ix.idx.repeats = append(ix.idx.repeats, &KeyError{Line: p.line, Column: p.col, Key: key, Msg: "set twice", Err: ErrSyntax})
}

// posOf returns where key is set or, failing that, the nearest enclosing
// key or table that the document has: "profiles[1].command" falls back to
// the [[profiles]] header when the profile has no command. Zero if none.
func (idx keyIndex) posOf(key string) position {
	for key != "" {
		if p, ok := idx.at[key]; ok {
			return p
		}
		if p, ok := idx.at[key+"[0]"]; ok {
			return p // an array of tables where a table was expected
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return position{}
}

// keyPos is where the document writes key itself (for a key that should
// not be there); the zero position if it does not.
func (idx keyIndex) keyPos(key string) position { return idx.keys[key] }

// keyAt returns the innermost key whose text starts at or before the 1-based
// line and column of a go-toml error; "" before the first key.
func (idx keyIndex) keyAt(doc []byte, line, col int) string {
	off := offsetAt(doc, line, col)
	// Entries are in document order; find the last one that starts at or
	// before off.
	i := sort.Search(len(idx.entries), func(i int) bool { return idx.entries[i].offset > off }) - 1
	if i < 0 {
		return ""
	}
	return idx.entries[i].key
}

// offsetAt turns a 1-based line and column into a byte offset in doc.
func offsetAt(doc []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(doc[off:], '\n')
		if i < 0 {
			return len(doc)
		}
		off += i + 1
	}
	return min(off+max(col-1, 0), len(doc))
}

// stripIndexes turns "profiles[1].command" into "profiles.command".
func stripIndexes(key string) string {
	var b strings.Builder
	depth := 0
	for _, r := range key {
		switch {
		case r == '[':
			depth++
		case r == ']' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}
