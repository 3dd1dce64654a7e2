package config

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// decodeLeniently is parse's second pass when strict decoding stopped at a
// value of the wrong type: go-toml reports only the first such value, and
// a user fixing a file one error per run deserves better. It reads the
// document into plain maps (which only a syntax error can fail), checks
// every key against the schema, drops the keys it finds wrong (each a
// KeyError), and decodes what is left onto Default() so that the rest can
// be validated too.
//
// first is the problem strict decoding reported; it replaces the pass's own
// report of the same key, since go-toml knows its exact line. ok is false
// when the pass cannot account for the strict error (a syntax error, or a
// problem this check does not know): parse then reports first alone.
func decodeLeniently(data []byte, idx keyIndex, first *KeyError) (c Config, errs []*KeyError, ok bool) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return Config{}, nil, false
	}
	var found []*KeyError
	checkTable(doc, "", idx, &found)
	if len(found) == 0 {
		return Config{}, nil, false
	}
	for i, e := range found {
		if e.Key == first.Key {
			found[i] = first
		}
	}
	rest, err := toml.Marshal(doc)
	if err != nil {
		return Config{}, nil, false
	}
	c = Default()
	dec := toml.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, nil, false
	}
	slices.SortStableFunc(found, func(a, b *KeyError) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return strings.Compare(a.Key, b.Key)
	})
	return c, found, true
}

// checkTable checks the keys of one table (prefix is its key with indexes,
// "" at the top) and deletes from it every key that is unknown or holds a
// value of the wrong type, reporting each.
func checkTable(t map[string]any, prefix string, idx keyIndex, out *[]*KeyError) {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		info, known := schema[stripIndexes(key)]
		if !known {
			path := strings.Split(stripIndexes(key), ".")
			*out = append(*out, &KeyError{Line: idx.lineOf(key), Key: key, Msg: "unknown key" + suggest(path), Err: ErrUnknownKey})
			delete(t, k)
			continue
		}
		if msg := checkValue(t[k], info, key, idx, out); msg != "" {
			*out = append(*out, &KeyError{Line: idx.lineOf(key), Key: key, Msg: msg, Err: ErrSyntax})
			delete(t, k)
		}
	}
}

// checkValue says what is wrong with v as the value of key, "" if nothing;
// tables and arrays of tables are checked key by key instead.
func checkValue(v any, info keyInfo, key string, idx keyIndex, out *[]*KeyError) string {
	t := info.typ
	switch {
	case t.Kind() == reflect.Struct:
		sub, ok := v.(map[string]any)
		if !ok {
			return wrongType(info, v)
		}
		checkTable(sub, key, idx, out)
		return ""
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		elems, ok := v.([]any)
		if !ok {
			return wrongType(info, v)
		}
		for i, e := range elems {
			sub, ok := e.(map[string]any)
			if !ok {
				return fmt.Sprintf("wrong type: want %s, got an element that is a TOML %s", info.want, tomlTypeOf(e))
			}
			checkTable(sub, fmt.Sprintf("%s[%d]", key, i), idx, out)
		}
		return ""
	case t.Kind() == reflect.Slice:
		elems, ok := v.([]any)
		if !ok {
			return wrongType(info, v)
		}
		for i, e := range elems {
			if msg := checkScalar(e, t.Elem(), info); msg != "" {
				return fmt.Sprintf("element %d: %s", i, msg)
			}
		}
		return ""
	}
	return checkScalar(v, t, info)
}

func checkScalar(v any, t reflect.Type, info keyInfo) string {
	if t == reflect.TypeFor[Duration]() {
		s, ok := v.(string)
		if !ok {
			return wrongType(info, v)
		}
		var d Duration
		if err := d.UnmarshalText([]byte(s)); err != nil {
			return err.Error()
		}
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wrongType(info, v)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wrongType(info, v)
		}
	case reflect.Float32, reflect.Float64:
		switch v.(type) {
		case float64, int64:
		default:
			return wrongType(info, v)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(int64)
		if !ok {
			return wrongType(info, v)
		}
		if reflect.Zero(t).OverflowInt(n) {
			return fmt.Sprintf("%d is out of range", n)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(int64)
		if !ok {
			return wrongType(info, v)
		}
		if n < 0 {
			return fmt.Sprintf("%d is negative; want 0 or more", n)
		}
		if reflect.Zero(t).OverflowUint(uint64(n)) {
			return fmt.Sprintf("%d is out of range", n)
		}
	default:
		return fmt.Sprintf("cannot check a value of Go type %s", t) // a config type this check does not know
	}
	return ""
}

func wrongType(info keyInfo, v any) string {
	return fmt.Sprintf("wrong type: want %s, got a TOML %s", info.want, tomlTypeOf(v))
}

// tomlTypeOf names the TOML type of a value go-toml decoded into an any.
func tomlTypeOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "table"
	}
	return "date-time"
}
