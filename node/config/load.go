package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Load reads the config file at path, decodes it on top of Default() and
// validates the result. A missing file is an error (errors.Is
// fs.ErrNotExist) that says how to create one. Every other problem is a
// *KeyError carrying path and, where known, the line; all of them are
// returned at once (errors.Join): unknown keys, values of the wrong type
// and broken rules alike. Only a TOML syntax error stops decoding and comes
// alone.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, fmt.Errorf("no config file at %s (create one with \"kith init\"): %w", path, err)
	}
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c, errs := parse(data)
	for _, e := range errs {
		e.File = path
	}
	if len(errs) > 0 {
		return Config{}, join(errs)
	}
	return c, nil
}

// Parse is Load for a file's contents.
func Parse(data []byte) (Config, error) {
	c, errs := parse(data)
	if len(errs) > 0 {
		return Config{}, join(errs)
	}
	return c, nil
}

func parse(data []byte) (Config, []*KeyError) {
	c := Default()
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(&c)
	idx := indexKeys(data)

	var errs []*KeyError
	var strict *toml.StrictMissingError
	switch {
	case err == nil:
	case errors.As(err, &strict):
		// go-toml decodes the whole document before it reports unknown
		// keys, so the rest of the config is complete and worth validating.
		for i := range strict.Errors {
			errs = append(errs, unknownKey(data, &strict.Errors[i], idx))
		}
	case len(idx.repeats) > 0:
		// go-toml names a key set twice by its last part, with no position;
		// the index has both.
		return Config{}, idx.repeats
	default:
		// A value of the wrong type (or one its type refuses) stops go-toml
		// at the first one; a second, lenient pass finds them all, and
		// decodes the rest. Anything it cannot account for is a syntax
		// error, which comes alone.
		lc, lerrs, ok := decodeLeniently(data, idx)
		if !ok {
			return Config{}, []*KeyError{decodeFailure(data, err, idx)}
		}
		c, errs = lc, lerrs
	}

	reported := make(map[string]bool, len(errs))
	for _, e := range errs {
		reported[e.Key] = true
	}
	for _, p := range c.validate() {
		if reported[p.Key] {
			continue // decoding refused the key's value; its default stands in
		}
		at := idx.posOf(p.Key)
		p.Line, p.Column = at.line, at.col
		errs = append(errs, p)
	}
	return c, errs
}

func unknownKey(data []byte, e *toml.DecodeError, idx keyIndex) *KeyError {
	line, col := e.Position()
	path := []string(e.Key())
	key := strings.Join(path, ".")
	// The index knows which [[profiles]] entry the key is in, and where the
	// key itself starts; go-toml's key does not, and its position is the
	// value's. Use the index when both name the same key.
	if k := idx.keyAt(data, line, col); k != "" && stripIndexes(k) == key {
		key = k
		if p := idx.keyPos(k); p.line > 0 {
			line, col = p.line, p.col
		}
	}
	return &KeyError{Line: line, Column: col, Key: key, Msg: "unknown key" + suggest(path), Err: ErrUnknownKey}
}

// decodeFailure reports a decoding error that the lenient pass could not
// account for: a TOML syntax error, at go-toml's position, naming the key
// it is in when there is one.
func decodeFailure(data []byte, err error, idx keyIndex) *KeyError {
	ke := &KeyError{Msg: strings.TrimPrefix(err.Error(), "toml: "), Err: ErrSyntax}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		ke.Line, ke.Column = de.Position()
		if ke.Key = failedKey(data, ke.Line, idx); ke.Key == "" {
			ke.Key = idx.keyAt(data, ke.Line, ke.Column)
		}
	}
	return ke
}

// failedKey names the key whose value a syntax error on line broke. go-toml's
// parser keeps no part of an expression it could not finish, so this asks it
// about each line from the one after the last key it read down to the error,
// with the value replaced: the first that reads as "key = value" is the key.
func failedKey(data []byte, line int, idx keyIndex) string {
	first := 1
	if n := len(idx.entries); n > 0 {
		last := idx.entries[n-1]
		first = bytes.Count(data[:last.offset], []byte("\n")) + 2
	}
	lines := bytes.Split(data, []byte("\n"))
	for l := first; l <= line && l <= len(lines); l++ {
		k, _, ok := bytes.Cut(lines[l-1], []byte("="))
		if !ok {
			continue
		}
		var p unstable.Parser
		p.Reset(append(bytes.Clone(k), " = 0"...))
		if p.NextExpression() && p.Expression().Kind == unstable.KeyValue {
			parts := []string{}
			for it := p.Expression().Key(); it.Next(); {
				parts = append(parts, string(it.Node().Data))
			}
			if idx.table != "" {
				parts = append([]string{idx.table}, parts...)
			}
			return strings.Join(parts, ".")
		}
	}
	return ""
}
