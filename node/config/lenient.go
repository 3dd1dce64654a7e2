package config

import (
	"bytes"
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// decodeLeniently is parse's second pass when strict decoding stopped at a
// value of the wrong type, or one its type refused: go-toml reports only
// the first such value, and a user fixing a file one error per run
// deserves better. It reads the document into plain maps (which only a
// syntax error can fail), checks every key against the schema, drops the
// keys it finds wrong (each a KeyError at the position of its value), and
// decodes what is left onto Default() so that the rest can be validated
// too. ok is false when the pass finds nothing wrong, or cannot read the
// document: parse then reports go-toml's error alone.
func decodeLeniently(data []byte, idx keyIndex) (c Config, errs []*KeyError, ok bool) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return Config{}, nil, false
	}
	var found []*KeyError
	checkTable(doc, "", idx, &found)
	if len(found) == 0 {
		return Config{}, nil, false
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
			kp := idx.keyPos(key)
			*out = append(*out, &KeyError{Line: kp.line, Column: kp.col, Key: key, Msg: "unknown key" + suggest(path), Err: ErrUnknownKey})
			delete(t, k)
			continue
		}
		if e := checkValue(t[k], info, key, idx, out); e != nil {
			*out = append(*out, e)
			delete(t, k)
		}
	}
}

// checkValue says what is wrong with v as the value of key, nil if
// nothing; tables and arrays of tables are checked key by key instead.
func checkValue(v any, info keyInfo, key string, idx keyIndex, out *[]*KeyError) *KeyError {
	t := info.typ
	switch {
	case isText(t):
	case t.Kind() == reflect.Struct:
		sub, ok := v.(map[string]any)
		if !ok {
			return idx.keyError(key, ErrSyntax, wrongType(info, v))
		}
		checkTable(sub, key, idx, out)
		return nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		elems, ok := v.([]any)
		if !ok {
			return idx.keyError(key, ErrSyntax, wrongType(info, v))
		}
		for i, e := range elems {
			ek := fmt.Sprintf("%s[%d]", key, i)
			sub, ok := e.(map[string]any)
			if !ok {
				return idx.keyError(ek, ErrSyntax, "wrong type: want a table, got a TOML "+tomlTypeOf(e))
			}
			checkTable(sub, ek, idx, out)
		}
		return nil
	case t.Kind() == reflect.Slice:
		elems, ok := v.([]any)
		if !ok {
			return idx.keyError(key, ErrSyntax, wrongType(info, v))
		}
		for i, e := range elems {
			if msg, kind := checkScalar(e, t.Elem(), keyInfo{want: tomlType("", t.Elem())}); msg != "" {
				return idx.keyError(fmt.Sprintf("%s[%d]", key, i), kind, msg)
			}
		}
		return nil
	}
	if msg, kind := checkScalar(v, t, info); msg != "" {
		return idx.keyError(key, kind, msg)
	}
	return nil
}

// checkScalar says what is wrong with one value, and what kind of problem
// that is: a TOML type that cannot be the key's is ErrSyntax, a value its
// type refuses (a misspelt level, a duration without a unit, a negative
// count) is ErrInvalid.
func checkScalar(v any, t reflect.Type, info keyInfo) (string, error) {
	if isText(t) {
		s, ok := v.(string)
		if !ok {
			return wrongType(info, v), ErrSyntax
		}
		if err := reflect.New(t).Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			return err.Error(), ErrInvalid
		}
		return "", nil
	}
	switch t.Kind() {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return wrongType(info, v), ErrSyntax
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return wrongType(info, v), ErrSyntax
		}
	case reflect.Float32, reflect.Float64:
		switch v.(type) {
		case float64, int64:
		default:
			return wrongType(info, v), ErrSyntax
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(int64)
		if !ok {
			return wrongType(info, v), ErrSyntax
		}
		if reflect.Zero(t).OverflowInt(n) {
			return fmt.Sprintf("%d is out of range", n), ErrInvalid
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(int64)
		if !ok {
			return wrongType(info, v), ErrSyntax
		}
		if n < 0 {
			return fmt.Sprintf("%d is negative; want 0 or more", n), ErrInvalid
		}
		if reflect.Zero(t).OverflowUint(uint64(n)) {
			return fmt.Sprintf("%d is out of range", n), ErrInvalid
		}
	default:
		return fmt.Sprintf("cannot check a value of Go type %s", t), ErrSyntax // a config type this check does not know
	}
	return "", nil
}

// isText reports whether values of t decode themselves from a TOML string
// (durations and the enums).
func isText(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
}

// keyError is a problem about key, at the position the document sets it.
func (idx keyIndex) keyError(key string, kind error, msg string) *KeyError {
	p := idx.posOf(key)
	return &KeyError{Line: p.line, Column: p.col, Key: key, Msg: msg, Err: kind}
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
		for _, e := range v.([]any) {
			if _, ok := e.(map[string]any); !ok {
				return "array"
			}
		}
		if len(v.([]any)) > 0 {
			return "array of tables"
		}
		return "array"
	case map[string]any:
		return "table"
	}
	return "date-time"
}
