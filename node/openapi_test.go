package node

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/kithmesh/kith/node/api"
)

// The OpenAPI document lists every route with a schema, and every property
// name in it is snake_case: one JSON naming style throughout.
func TestOpenAPIDocument(t *testing.T) {
	var doc struct {
		OpenAPI    string                                `json:"openapi"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi = %q", doc.OpenAPI)
	}
	for _, r := range apiRoutes {
		if _, ok := doc.Paths[api.Prefix+r.path][strings.ToLower(r.method)]; !ok {
			t.Errorf("%s %s is not in the document", r.method, r.path)
		}
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for name, s := range doc.Components.Schemas {
		for p := range s.Properties {
			if !snake.MatchString(p) {
				t.Errorf("schema %s: property %q is not snake_case", name, p)
			}
		}
	}
	if _, ok := doc.Components.Schemas["Profile"]; !ok {
		t.Error("no Profile schema (GET /profiles)")
	}
}
