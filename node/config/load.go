package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"github.com/pelletier/go-toml/v2"
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
	var decode *toml.DecodeError
	switch {
	case err == nil:
	case errors.As(err, &strict):
		// go-toml decodes the whole document before it reports unknown
		// keys, so the rest of the config is complete and worth validating.
		for i := range strict.Errors {
			errs = append(errs, unknownKey(&strict.Errors[i], idx))
		}
	default:
		// A value of the wrong type stops go-toml at the first one; a
		// second, lenient pass finds the others and decodes the rest.
		var first *KeyError
		if errors.As(err, &decode) {
			first = syntaxError(decode, idx)
		} else {
			first = plainError(err, idx)
		}
		lc, lerrs, ok := decodeLeniently(data, idx, first)
		if !ok {
			return Config{}, []*KeyError{first}
		}
		c, errs = lc, lerrs
	}

	for _, p := range c.validate() {
		p.Line = idx.lineOf(p.Key)
		errs = append(errs, p)
	}
	return c, errs
}

func unknownKey(e *toml.DecodeError, idx keyIndex) *KeyError {
	line, col := e.Position()
	path := []string(e.Key())
	key := strings.Join(path, ".")
	// The index knows which [[profiles]] entry the line is in; go-toml's
	// key does not. Use the indexed form when both name the same key.
	if k := idx.keyAt(line); k != "" && stripIndexes(k) == key {
		key = k
	}
	return &KeyError{Line: line, Column: col, Key: key, Msg: "unknown key" + suggest(path), Err: ErrUnknownKey}
}

// typeErrRe matches go-toml's message for a value of the wrong type, which
// names the Go field ("config.Limits.MaxFrameBytes") rather than the key.
var typeErrRe = regexp.MustCompile(`^cannot decode TOML ([\w ]+) into struct field \w+\.(\w+\.\w+) of type \S+$`)

func syntaxError(e *toml.DecodeError, idx keyIndex) *KeyError {
	line, col := e.Position()
	msg := strings.TrimPrefix(e.Error(), "toml: ")
	key := idx.keyAt(line)
	if m := typeErrRe.FindStringSubmatch(msg); m != nil {
		if k, ok := goFields[m[2]]; ok {
			msg = fmt.Sprintf("wrong type: want %s, got a TOML %s", schema[k].want, m[1])
			if stripIndexes(key) != k {
				key = k // the scan guessed wrong; the field is certain
			}
		}
	}
	return &KeyError{Line: line, Column: col, Key: key, Msg: msg, Err: ErrSyntax}
}

var (
	repeatedRe = regexp.MustCompile(`^(?:key (\S+) is already defined|table (\S+) already exists)$`)
	negativeRe = regexp.MustCompile(`^negative number (-\d+) does not fit in an? \w+$`)
)

// plainError places the errors that go-toml reports without a position,
// where the index can tell which key they are about.
func plainError(err error, idx keyIndex) *KeyError {
	msg := strings.TrimPrefix(err.Error(), "toml: ")
	ke := &KeyError{Msg: msg, Err: ErrSyntax}
	if m := repeatedRe.FindStringSubmatch(msg); m != nil {
		ke.Key, ke.Msg = m[1]+m[2], "set twice"
		if e, ok := idx.repeated(ke.Key); ok {
			ke.Key, ke.Line = e.key, e.line
		}
	}
	if m := typeErrRe.FindStringSubmatch(msg); m != nil {
		if k, ok := goFields[m[2]]; ok {
			ke.Key, ke.Line = k, idx.lineOf(k)
			ke.Msg = fmt.Sprintf("wrong type: want %s, got a TOML %s", schema[k].want, m[1])
		}
	}
	if m := negativeRe.FindStringSubmatch(msg); m != nil {
		for _, e := range idx.entries {
			k, ok := schema[stripIndexes(e.key)]
			if v := strings.Fields(e.value); ok && k.unsigned && len(v) > 0 && v[0] == m[1] {
				ke.Key, ke.Line, ke.Msg = e.key, e.line, m[1]+" is negative; want 0 or more"
				break
			}
		}
	}
	return ke
}
