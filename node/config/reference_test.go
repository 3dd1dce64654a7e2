package config

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"
)

// referencePath is the generated reference of every config key.
const referencePath = "../../docs/config.md"

var updateDocs = flag.Bool("update-docs", false, "rewrite "+referencePath+" from the config types")

// TestConfigReference fails when docs/config.md differs from what the
// config types say (their toml tags, doc comments and Default()); run
// "go generate ./node/config" (or this test with -update-docs) to rewrite it.
func TestConfigReference(t *testing.T) {
	got, err := renderReference(".")
	if err != nil {
		t.Fatal(err)
	}
	if *updateDocs {
		if err := os.WriteFile(referencePath, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v (run: go generate ./node/config)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of date with the config types: run go generate ./node/config", referencePath)
	}
}

// fieldDocs maps "Type.Field" to the field's doc comment, from the
// package's source in dir.
func fieldDocs(dir string) (map[string]string, error) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, fl := range st.Fields.List {
				for _, name := range fl.Names {
					out[ts.Name.Name+"."+name.Name] = fl.Doc.Text()
				}
			}
			return false
		})
	}
	return out, nil
}

func renderReference(dir string) ([]byte, error) {
	docs, err := fieldDocs(dir)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n" +
		"<!-- Generated from node/config by \"go generate ./node/config\"; do not edit. -->\n\n" +
		"Every key of `$KITH_HOME/config.toml`, generated from the config types\n" +
		"(`node/config`): the key, its TOML type, its default and the field's\n" +
		"documentation. Unknown keys are errors; `kith daemon --check` checks a\n" +
		"file; `kith init` writes one with every key and its default. Keys marked\n" +
		"*live* change on `kith reload` (or SIGHUP); the others need a restart.\n")
	var walk func(table string, t reflect.Type, v reflect.Value)
	walk = func(table string, t reflect.Type, v reflect.Value) {
		var subs []reflect.StructField
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
			if f.Type.Kind() == reflect.Struct || f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
				subs = append(subs, f)
				continue
			}
			live := ""
			if isLiveKey(key) {
				live = " · *live*"
			}
			fmt.Fprintf(&b, "\n### `%s`\n\n%s · default: %s%s\n\n", key, tomlType(leaf, f.Type), defaultText(v, i), live)
			b.WriteString(docText(docs[t.Name()+"."+f.Name]))
		}
		for _, f := range subs {
			leaf, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			key := leaf
			if table != "" {
				key = table + "." + leaf
			}
			if f.Type.Kind() == reflect.Struct {
				fmt.Fprintf(&b, "\n## `[%s]`\n\n", key)
				b.WriteString(docText(docs[t.Name()+"."+f.Name]))
				fv, _ := t.FieldByName(f.Name)
				walk(key, f.Type, v.FieldByIndex(fv.Index))
				continue
			}
			fmt.Fprintf(&b, "\n## `[[%s]]`\n\n", key)
			if isLiveKey(key) {
				b.WriteString("*live*: the whole list changes on `kith reload`.\n\n")
			}
			b.WriteString(docText(docs[t.Name()+"."+f.Name]))
			walk(key, f.Type.Elem(), reflect.New(f.Type.Elem()).Elem())
		}
	}
	walk("", reflect.TypeFor[Config](), reflect.ValueOf(Default()))
	return b.Bytes(), nil
}

// isLiveKey: the keys node.Reload applies live (node/reload.go).
func isLiveKey(key string) bool {
	switch key {
	case "log_level", "peers", "policy.mode", "profiles":
		return true
	}
	return strings.HasPrefix(key, "profiles.")
}

// defaultText is field i of v in TOML, as config.toml would spell it.
func defaultText(v reflect.Value, i int) string {
	f := v.Field(i)
	if f.IsZero() && f.Kind() != reflect.Bool && f.Kind() != reflect.Int && f.Kind() != reflect.Uint64 && f.Kind() != reflect.Int64 && f.Kind() != reflect.Uint32 {
		if f.Kind() == reflect.Slice {
			return "`[]`"
		}
		if f.Kind() == reflect.String {
			return "`\"\"`"
		}
	}
	out, err := toml.Marshal(map[string]any{"k": f.Interface()})
	if err != nil {
		return fmt.Sprintf("`%v`", f.Interface())
	}
	s := strings.TrimSpace(strings.TrimPrefix(string(out), "k = "))
	if s == "''" {
		s = `""` // an enum's default that is no value of its own
	}
	return "`" + s + "`"
}

// docText renders a doc comment as Markdown paragraphs.
func docText(s string) string {
	if strings.TrimSpace(s) == "" {
		return ""
	}
	var p doc.Package
	pr := p.Printer()
	return string(pr.Markdown(p.Parser().Parse(s)))
}
