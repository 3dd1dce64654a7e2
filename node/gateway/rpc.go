package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// JSON-RPC and A2A error codes (A2A specification, JSON-RPC binding).
const (
	codeParseError          = -32700
	codeInvalidRequest      = -32600
	codeMethodNotFound      = -32601
	codeVersionNotSupported = -32009
)

// maxMethodLen bounds a JSON-RPC method name; the longest A2A method is
// "DeleteTaskPushNotificationConfig".
const maxMethodLen = 64

// envelope is a JSON-RPC 2.0 request as far as the gateway checks it
// before a2a-go decodes the params.
type envelope struct {
	ID     any    // string, number or nil
	Method string // non-empty
}

var (
	errBatch        = errors.New("batch requests are not supported; send one request per call")
	errNotification = errors.New("id: required (notifications are not supported)")
)

// decodeEnvelope checks a JSON-RPC request's envelope: one object,
// "jsonrpc": "2.0", an id that is a string, a number or null, a method, and
// params that are an object when present. A parse error is ErrParseError;
// the rest ErrInvalidRequest, with the id when one could be read.
func decodeEnvelope(body []byte) (envelope, error) {
	var env envelope
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		return env, fmt.Errorf("%w: %w", a2a.ErrInvalidRequest, errBatch)
	}
	var raw struct {
		JSONRPC *string         `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  *string         `json:"method"`
		Params  json.RawMessage `json:"params"`
	}
	if !utf8.Valid(body) {
		return env, fmt.Errorf("%w: body is not UTF-8", a2a.ErrParseError)
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return env, fmt.Errorf("%w: %s: want %s", a2a.ErrInvalidRequest, typeErr.Field, typeErr.Type)
		}
		return env, fmt.Errorf("%w: %v", a2a.ErrParseError, err)
	}
	if raw.ID == nil {
		return env, fmt.Errorf("%w: %w", a2a.ErrInvalidRequest, errNotification)
	}
	id, err := decodeID(raw.ID)
	if err != nil {
		return env, fmt.Errorf("%w: id: %v", a2a.ErrInvalidRequest, err)
	}
	env.ID = id
	switch {
	case raw.JSONRPC == nil || *raw.JSONRPC != "2.0":
		return env, fmt.Errorf("%w: jsonrpc: want \"2.0\"", a2a.ErrInvalidRequest)
	case raw.Method == nil || *raw.Method == "":
		return env, fmt.Errorf("%w: method: required", a2a.ErrInvalidRequest)
	case len(*raw.Method) > maxMethodLen:
		return env, fmt.Errorf("%w: method: %d bytes; at most %d", a2a.ErrInvalidRequest, len(*raw.Method), maxMethodLen)
	}
	env.Method = *raw.Method
	if p := bytes.TrimSpace(raw.Params); len(p) > 0 && p[0] != '{' && !bytes.Equal(p, []byte("null")) {
		return env, fmt.Errorf("%w: params: want an object", a2a.ErrInvalidRequest)
	}
	return env, nil
}

func decodeID(b json.RawMessage) (any, error) {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil, nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, err
		}
		if len(s) > 256 {
			return nil, fmt.Errorf("%d bytes; at most 256", len(s))
		}
		return s, nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, errors.New("want a string, a number or null")
	}
	if _, err := strconv.ParseFloat(n.String(), 64); err != nil {
		return nil, errors.New("want a string, a number or null")
	}
	return n, nil
}

// errorCode is the JSON-RPC code of an error from decodeEnvelope.
func errorCode(err error) int {
	if errors.Is(err, a2a.ErrParseError) {
		return codeParseError
	}
	return codeInvalidRequest
}

// jsonContentType reports whether a Content-Type names JSON (A2A clients
// send application/json; application/a2a+json is the v1.0 media type).
func jsonContentType(v string) bool {
	mt, _, err := mime.ParseMediaType(v)
	return err == nil && (mt == "application/json" || mt == "application/a2a+json")
}

// readBody reads at most max bytes; more is errTooLarge. A body that
// declares more than max is refused unread.
func readBody(r *http.Request, max int64) ([]byte, error) {
	if r.ContentLength > max {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errTooLarge
	}
	return b, nil
}

var errTooLarge = errors.New("request body too large")

// rpc checks a JSON-RPC request (method, content type, size, envelope,
// version) before handing it to the v1.0 or the v0.3 handler, so that bad
// input is answered with a standard error and never decoded further.
func (g *Gateway) rpc(v1, v0 http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeRPCError(w, http.StatusMethodNotAllowed, nil, codeInvalidRequest, "JSON-RPC wants POST", nil)
			return
		}
		if !jsonContentType(r.Header.Get("Content-Type")) {
			writeRPCError(w, http.StatusUnsupportedMediaType, nil, codeInvalidRequest,
				"Content-Type "+quote(r.Header.Get("Content-Type"))+": want application/json", nil)
			return
		}
		body, err := readBody(r, g.cfg.MaxBodyBytes)
		if errors.Is(err, errTooLarge) {
			writeRPCError(w, http.StatusRequestEntityTooLarge, nil, codeInvalidRequest,
				fmt.Sprintf("request body over %d bytes", g.cfg.MaxBodyBytes), nil)
			return
		}
		if err != nil {
			writeRPCError(w, http.StatusBadRequest, nil, codeParseError, "reading the body: "+err.Error(), nil)
			return
		}
		env, err := decodeEnvelope(body)
		if err != nil {
			writeRPCError(w, http.StatusOK, env.ID, errorCode(err), err.Error(), nil)
			return
		}
		var h http.Handler
		switch v := r.Header.Get("A2A-Version"); v {
		case "", "0.3", "0.3.0":
			h = v0
		case "1.0", "1", "1.0.0":
			h = v1
		default:
			writeRPCError(w, http.StatusOK, env.ID, codeVersionNotSupported,
				"A2A-Version "+quote(v)+" is not supported; this agent speaks 1.0, and 0.3 when the header is empty", nil)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		h.ServeHTTP(w, r)
	})
}

// rest bounds HTTP+JSON requests: POST bodies must be JSON and within the
// cap. a2a-go answers the rest with its own standard errors.
func (g *Gateway) rest(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if !jsonContentType(r.Header.Get("Content-Type")) && r.ContentLength != 0 {
				writeProblem(w, http.StatusUnsupportedMediaType, "Content-Type "+quote(r.Header.Get("Content-Type"))+": want application/json")
				return
			}
			body, err := readBody(r, g.cfg.MaxBodyBytes)
			if errors.Is(err, errTooLarge) {
				writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", g.cfg.MaxBodyBytes))
				return
			}
			if err != nil {
				writeProblem(w, http.StatusBadRequest, "reading the body: "+err.Error())
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		h.ServeHTTP(w, r)
	})
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// writeRPCError answers with a JSON-RPC error object.
func writeRPCError(w http.ResponseWriter, status int, id any, code int, msg string, data any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		JSONRPC string   `json:"jsonrpc"`
		ID      any      `json:"id"`
		Error   rpcError `json:"error"`
	}{"2.0", id, rpcError{code, msg, data}})
}

// writeProblem answers an HTTP+JSON request with the binding's error shape.
func writeProblem(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": status, "status": http.StatusText(status), "message": msg,
	}})
}

func quote(s string) string { return strconv.Quote(s) }
