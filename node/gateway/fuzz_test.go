package gateway

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// FuzzDecodeEnvelope: any body decodes to an envelope or to a parse or
// invalid-request error, never a panic; an accepted envelope has a method
// within bounds and an id of an allowed type.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}`,
		`{"jsonrpc":"2.0","id":"x","method":"message/send"}`,
		`[{"jsonrpc":"2.0"}]`, `{"jsonrpc":"2.0","id":null,"method":"GetTask","params":null}`,
		`{"id":1e999}`, `{"jsonrpc":"2.0","id":{},"method":1}`, "\xff", ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := decodeEnvelope(body)
		if err != nil {
			if !errors.Is(err, a2a.ErrParseError) && !errors.Is(err, a2a.ErrInvalidRequest) {
				t.Fatalf("error %v is neither parse error nor invalid request", err)
			}
			return
		}
		if env.Method == "" || len(env.Method) > maxMethodLen {
			t.Fatalf("accepted method %q", env.Method)
		}
		switch env.ID.(type) {
		case nil, string, json.Number:
		default:
			t.Fatalf("accepted id %T", env.ID)
		}
	})
}

// FuzzPartsFromA2A: message parts from any JSON convert or fail with a
// path, and what converts is a valid offer part.
func FuzzPartsFromA2A(f *testing.F) {
	f.Add([]byte(`[{"text":"hi"},{"data":{"a":1}},{"raw":"AAE=","mediaType":"x/y"},{"url":"http://x"}]`))
	f.Add([]byte(`[{"data":[1,2]}]`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var parts a2a.ContentParts
		if json.Unmarshal(b, &parts) != nil {
			return
		}
		out, err := partsFromA2A(parts)
		if err != nil {
			return
		}
		if len(out) != len(parts) {
			t.Fatalf("%d parts became %d", len(parts), len(out))
		}
	})
}

// FuzzCanonicalCard: canonicalization of any card that decodes is
// deterministic and its output is JSON.
func FuzzCanonicalCard(f *testing.F) {
	f.Add([]byte(`{"name":"a","description":"\u2028<>&","version":"1","skills":[{"id":"s","name":"s","description":"d","tags":[]}],"capabilities":{"streaming":true}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var card a2a.AgentCard
		if json.Unmarshal(b, &card) != nil {
			return
		}
		x, err := CanonicalCard(&card)
		if err != nil {
			return
		}
		y, _ := CanonicalCard(&card)
		if string(x) != string(y) || !json.Valid(x) {
			t.Fatalf("canonical form not stable or not JSON: %s", x)
		}
	})
}
