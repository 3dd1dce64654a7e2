package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// keyInfo describes one key of the file, derived from Config's toml tags so
// that it cannot drift from the struct.
type keyInfo struct {
	table string // "" for top level, "limits", "profiles", ...
	leaf  string
	want  string // the TOML type, for messages: "an integer", ...
	typ   reflect.Type
}

// schema maps every dotted key ("limits.max_timeout", "profiles.command";
// array tables without indexes) to its description.
var schema = buildSchema()

func buildSchema() map[string]keyInfo {
	m := make(map[string]keyInfo)
	var walk func(table string, t reflect.Type)
	walk = func(table string, t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			leaf, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if leaf == "" || leaf == "-" {
				continue
			}
			key := leaf
			if table != "" {
				key = table + "." + leaf
			}
			m[key] = keyInfo{
				table: table,
				leaf:  leaf,
				want:  tomlType(leaf, f.Type),
				typ:   f.Type,
			}
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(key, f.Type)
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
				walk(key, f.Type.Elem())
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	return m
}

func tomlType(leaf string, t reflect.Type) string {
	if t == reflect.TypeFor[Duration]() {
		return `a duration string such as "30s"`
	}
	if e, ok := reflect.Zero(t).Interface().(enumType); ok {
		return "one of " + e.allowed()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Struct:
		return fmt.Sprintf("a table [%s]", leaf)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return fmt.Sprintf("an array of tables [[%s]]", leaf)
		}
		return "an array of " + strings.TrimPrefix(tomlType(leaf, t.Elem()), "a ") + "s"
	}
	return t.String()
}

// suggest returns a hint for an unknown key (path as go-toml reports it):
// the key it probably meant, or the table where the key belongs. A key set
// after a [table] header belongs to that table, which is the commonest way
// to write a valid top-level key into the wrong place.
func suggest(path []string) string {
	if len(path) == 0 {
		return ""
	}
	leaf := path[len(path)-1]
	table := strings.Join(path[:len(path)-1], ".")

	var elsewhere []string
	for key, k := range schema {
		// Only moves between the top level and a table are likely slips;
		// "path" in a profile is not a misplaced store.path.
		if k.leaf == leaf && k.table != table && (k.table == "" || table == "") {
			elsewhere = append(elsewhere, key)
		}
	}
	sort.Strings(elsewhere)
	if len(elsewhere) > 0 {
		k := schema[elsewhere[0]]
		if k.table == "" {
			return fmt.Sprintf("; %s is a top-level key: move it above the first [table]", leaf)
		}
		return fmt.Sprintf("; %s belongs in [%s]", leaf, k.table)
	}

	best, bestDist := "", 3
	if len(leaf) < 5 {
		bestDist = 2
	}
	for _, k := range schema {
		if k.table != table {
			continue
		}
		if d := editDistance(leaf, k.leaf); d < bestDist || (d == bestDist && k.leaf < best) {
			best, bestDist = k.leaf, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
