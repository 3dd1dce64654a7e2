package node

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/kithmesh/kith/node/api"
)

// The OpenAPI 3.1 document of the REST API is generated from apiRoutes and
// the api package's types (their JSON tags), so it always describes what
// the daemon serves.

var (
	openAPIOnce sync.Once
	openAPIDoc  []byte
)

// OpenAPIDocument returns the REST API's OpenAPI document.
func OpenAPIDocument() []byte {
	openAPIOnce.Do(func() {
		g := schemaGen{defs: map[string]any{}}
		paths := map[string]map[string]any{}
		param := regexp.MustCompile(`\{(\w+)\}`)
		for _, r := range apiRoutes {
			op := map[string]any{"summary": r.summary, "responses": map[string]any{}}
			var params []any
			for _, m := range param.FindAllStringSubmatch(r.path, -1) {
				params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
			}
			if params != nil {
				op["parameters"] = params
			}
			if r.request != nil {
				op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
					"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(r.request))}}}
			}
			ok := map[string]any{"description": "OK"}
			if r.stream {
				ok["description"] = "server-sent events; each data line is one JSON object of this schema"
				ok["content"] = map[string]any{"text/event-stream": map[string]any{"schema": g.schema(reflect.TypeOf(r.response))}}
			} else if r.response != nil {
				ok["content"] = map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(r.response))}}
			}
			op["responses"] = map[string]any{
				"200":     ok,
				"401":     map[string]any{"description": "no or wrong bearer token (HTTP listener only)", "content": errContent(&g)},
				"default": map[string]any{"description": "an error", "content": errContent(&g)},
			}
			p := api.Prefix + r.path
			if paths[p] == nil {
				paths[p] = map[string]any{}
			}
			paths[p][strings.ToLower(r.method)] = op
		}
		doc := map[string]any{
			"openapi": "3.1.0",
			"info": map[string]any{"title": "kith REST API", "version": Version,
				"description": "The API of a kith node, on its unix socket and on the [api] HTTP listener. JSON field names are snake_case. " +
					"The A2A gateway (agent cards, JSON-RPC, HTTP+JSON) is served beside it; see the A2A specification."},
			"paths":      paths,
			"components": map[string]any{"schemas": g.defs, "securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
			"security":   []any{map[string]any{"bearer": []any{}}},
		}
		openAPIDoc, _ = json.MarshalIndent(doc, "", "  ")
	})
	return openAPIDoc
}

func errContent(g *schemaGen) map[string]any {
	return map[string]any{"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(api.Error{}))}}
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPIDocument())
}

type schemaGen struct{ defs map[string]any }

var (
	timeType      = reflect.TypeOf(time.Time{})
	textMarshaler = reflect.TypeOf((*interface{ MarshalText() ([]byte, error) })(nil)).Elem()
)

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t.Implements(textMarshaler):
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Struct:
		if t.Name() == "" {
			return g.object(t)
		}
		if _, ok := g.defs[t.Name()]; !ok {
			g.defs[t.Name()] = map[string]any{} // placeholder for recursion
			g.defs[t.Name()] = g.object(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + t.Name()}
	}
	return map[string]any{}
}

func (g *schemaGen) object(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous && f.Tag.Get("json") == "" {
				walk(f.Type)
				continue
			}
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			props[name] = g.schema(f.Type)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				required = append(required, name)
			}
		}
	}
	walk(t)
	out := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		out["required"] = required
	}
	return out
}
