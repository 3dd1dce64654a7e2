package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// seenRequest is what the fake server received, decoded independently of
// the executor's own request type.
type seenRequest struct {
	Path string
	Auth string
	Body struct {
		Model         string `json:"model"`
		Messages      []struct{ Role, Content string }
		Stream        bool `json:"stream"`
		StreamOptions *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		MaxTokens *uint64 `json:"max_tokens"`
	}
}

// chatServer is a real HTTP server on loopback answering POST
// /v1/chat/completions the way Ollama and vLLM do.
type chatServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seenRequest
	// release unblocks handlers that wait for the client to go away, should
	// the client never do so.
	release chan struct{}
}

func newChatServer(t *testing.T, respond func(w http.ResponseWriter, r *http.Request)) *chatServer {
	t.Helper()
	s := &chatServer{release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var seen seenRequest
		seen.Path, seen.Auth = r.URL.Path, r.Header.Get("Authorization")
		if err := json.NewDecoder(r.Body).Decode(&seen.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, seen)
		s.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		respond(w, r)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(s.release) })
	return s
}

func (s *chatServer) lastRequest(t *testing.T) seenRequest {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("server received no request")
	}
	return s.reqs[len(s.reqs)-1]
}

func (s *chatServer) executor() OpenAI {
	return OpenAI{BaseURL: s.URL + "/v1", Model: "llama3.2", Client: s.Client()}
}

// sendEvents writes each payload as one server-sent event and flushes it,
// as a streaming server does per token.
func sendEvents(w http.ResponseWriter, payloads ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	for _, p := range payloads {
		fmt.Fprintf(w, "data: %s\n\n", p)
		w.(http.Flusher).Flush()
	}
}

// chunk is an Ollama-style chat.completion.chunk carrying one delta.
func chunk(content, finish string) string {
	fr := "null"
	if finish != "" {
		fr = `"` + finish + `"`
	}
	c, _ := json.Marshal(content)
	return `{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1767225600,"model":"llama3.2",` +
		`"system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"role":"assistant","content":` +
		string(c) + `},"finish_reason":` + fr + `}]}`
}

func usageChunk(prompt, completion uint64) string {
	return fmt.Sprintf(`{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1767225600,"model":"llama3.2",`+
		`"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		prompt, completion, prompt+completion)
}

// serveTranscript replays a recorded stream event by event.
func serveTranscript(t *testing.T, name string) func(http.ResponseWriter, *http.Request) {
	raw, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range bytes.SplitAfter(raw, []byte("\n\n")) {
			w.Write(ev)
			w.(http.Flusher).Flush()
		}
	}
}

func TestOpenAITranscripts(t *testing.T) {
	for _, tc := range []struct {
		file  string
		usage Usage
	}{
		{"ollama.sse", Usage{Prompt: 26, Completion: 4, Total: 30}},
		{"vllm.sse", Usage{Prompt: 31, Completion: 4, Total: 35}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			srv := newChatServer(t, serveTranscript(t, tc.file))
			o := srv.executor()
			o.BaseURL += "/" // a trailing slash must not matter
			o.APIKey, o.System = "sk-local", "Be brief."
			var c collector
			res, err := o.Execute(context.Background(), Task{Text: "Say hello.", BudgetTokens: 100}, c.emit)
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != "Hello from kith." || res.StoppedAtBudget {
				t.Fatalf("result %+v", res)
			}
			if got := strings.Join(c.texts(), "|"); got != "Hello| from| kith|." {
				t.Fatalf("updates %q", got)
			}
			if res.Usage != tc.usage {
				t.Fatalf("usage %+v, want %+v", res.Usage, tc.usage)
			}
			req := srv.lastRequest(t)
			b := req.Body
			if req.Path != "/v1/chat/completions" || req.Auth != "Bearer sk-local" || b.Model != "llama3.2" {
				t.Fatalf("request %+v", req)
			}
			if !b.Stream || b.StreamOptions == nil || !b.StreamOptions.IncludeUsage {
				t.Fatalf("streaming not requested: %+v", b)
			}
			if b.MaxTokens == nil || *b.MaxTokens != 100 {
				t.Fatalf("max_tokens = %v, want the budget 100", b.MaxTokens)
			}
			if len(b.Messages) != 2 || b.Messages[0].Role != "system" || b.Messages[0].Content != "Be brief." ||
				b.Messages[1].Role != "user" || b.Messages[1].Content != "Say hello." {
				t.Fatalf("messages %+v", b.Messages)
			}
		})
	}
}

// Updates arrive in order and while the response is still open: the
// server holds back everything after the first token until the client has
// emitted it.
func TestOpenAIStreamsLive(t *testing.T) {
	first := make(chan struct{})
	const n = 50
	srv := newChatServer(t, func(w http.ResponseWriter, r *http.Request) {
		sendEvents(w, chunk("t0 ", ""))
		select {
		case <-first:
		case <-r.Context().Done():
			return
		}
		for i := 1; i < n; i++ {
			sendEvents(w, chunk(fmt.Sprintf("t%d ", i), ""))
		}
		sendEvents(w, chunk("", "stop"), usageChunk(5, n), "[DONE]")
	})
	var c collector
	var once sync.Once
	emit := func(u Update) {
		c.emit(u)
		once.Do(func() { close(first) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := srv.executor().Execute(ctx, Task{Text: "count"}, emit)
	if err != nil {
		t.Fatal(err)
	}
	got := c.texts()
	if len(got) != n {
		t.Fatalf("%d updates, want %d", len(got), n)
	}
	for i, u := range got {
		if u != fmt.Sprintf("t%d ", i) {
			t.Fatalf("update %d = %q: out of order", i, u)
		}
	}
	if res.Text != strings.Join(got, "") || res.Usage.Completion != n {
		t.Fatalf("result %+v", res)
	}
	if mt := srv.lastRequest(t).Body.MaxTokens; mt != nil {
		t.Fatalf("max_tokens %d sent without a budget", *mt)
	}
}

func TestOpenAIHTTPErrors(t *testing.T) {
	for _, tc := range []struct {
		code int
		body string
		want string
	}{
		{http.StatusInternalServerError, `{"error":{"message":"model \"llama9\" not found","type":"api_error"}}`,
			`model "llama9" not found`},
		{http.StatusUnauthorized, `{"error":"invalid api key"}`, "invalid api key"},
		{http.StatusServiceUnavailable, strings.Repeat("overloaded\n", 10_000), `overloaded\noverloaded`},
	} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			srv := newChatServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				io.WriteString(w, tc.body)
			})
			_, err := srv.executor().Execute(context.Background(), Task{Text: "x"}, nil)
			if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), fmt.Sprint(tc.code)) {
				t.Fatalf("err = %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q lacks the body", err)
			}
			if len(err.Error()) > 2<<10 {
				t.Fatalf("error is %d bytes; the body snippet should be capped", len(err.Error()))
			}
		})
	}
}

func TestOpenAIBadStreams(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []string
		raw    string // written as-is after the events
		want   string // in the error
		text   string // partial output kept
	}{
		{name: "malformed chunk", events: []string{chunk("ok", ""), `{"choices":[{"delta":{"content":"x"`}, want: "malformed", text: "ok"},
		{name: "wrong types", events: []string{`{"choices":[{"delta":{"content":7}}]}`}, want: "malformed"},
		{name: "negative usage", events: []string{`{"choices":[],"usage":{"prompt_tokens":-1}}`}, want: "malformed"},
		{name: "error event", events: []string{chunk("par", ""), `{"error":{"message":"CUDA out of memory","type":"api_error"}}`},
			want: "CUDA out of memory", text: "par"},
		{name: "cut off", events: []string{chunk("half", "")}, want: "before [DONE]", text: "half"},
		{name: "line too long", raw: "data: " + strings.Repeat("x", 2<<20) + "\n\n", want: "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newChatServer(t, func(w http.ResponseWriter, _ *http.Request) {
				sendEvents(w, tc.events...)
				io.WriteString(w, tc.raw)
			})
			res, err := srv.executor().Execute(context.Background(), Task{Text: "x"}, nil)
			if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrFailed mentioning %q", err, tc.want)
			}
			if res.Text != tc.text {
				t.Fatalf("partial text %q, want %q", res.Text, tc.text)
			}
		})
	}
}

func TestOpenAIResponseCap(t *testing.T) {
	srv := newChatServer(t, func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i < 1000; i++ {
			sendEvents(w, chunk("token ", ""))
		}
		sendEvents(w, chunk("", "stop"), "[DONE]")
	})
	o := srv.executor()
	o.MaxResponseBytes = 10 << 10
	_, err := o.Execute(context.Background(), Task{Text: "x"}, nil)
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "larger than 10240 bytes") {
		t.Fatalf("err = %v", err)
	}
	o.MaxResponseBytes = 1 << 20
	if _, err := o.Execute(context.Background(), Task{Text: "x"}, nil); err != nil {
		t.Fatalf("within the cap: %v", err)
	}
}

func TestOpenAICancelMidStream(t *testing.T) {
	srv := newChatServer(t, func(w http.ResponseWriter, r *http.Request) {
		sendEvents(w, chunk("first", ""))
		select { // a model still generating, slowly
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelled time.Time
	emit := func(Update) {
		cancelled = time.Now()
		cancel()
	}
	res, err := srv.executor().Execute(ctx, Task{Text: "x"}, emit)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(cancelled); d > time.Second {
		t.Fatalf("returned %v after cancel", d)
	}
	if res.Text != "first" {
		t.Fatalf("partial result %q", res.Text)
	}
}

func TestOpenAIBudget(t *testing.T) {
	t.Run("server stops at max_tokens", func(t *testing.T) {
		srv := newChatServer(t, func(w http.ResponseWriter, _ *http.Request) {
			sendEvents(w, chunk("a", ""), chunk("b", ""), chunk("c", "length"), usageChunk(9, 3), "[DONE]")
		})
		res, err := srv.executor().Execute(context.Background(), Task{Text: "x", BudgetTokens: 3}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != "abc" || !res.StoppedAtBudget || res.Usage.Completion != 3 {
			t.Fatalf("result %+v", res)
		}
		if mt := srv.lastRequest(t).Body.MaxTokens; mt == nil || *mt != 3 {
			t.Fatalf("max_tokens %v, want 3", mt)
		}
	})
	t.Run("server ignoring max_tokens is cut off", func(t *testing.T) {
		srv := newChatServer(t, func(w http.ResponseWriter, r *http.Request) {
			for i := 0; r.Context().Err() == nil && i < 10_000; i++ {
				sendEvents(w, chunk(fmt.Sprintf("w%d ", i), ""))
			}
		})
		var c collector
		res, err := srv.executor().Execute(context.Background(), Task{Text: "x", BudgetTokens: 3}, c.emit)
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != "w0 w1 w2 " || !res.StoppedAtBudget || c.joined() != res.Text {
			t.Fatalf("result %+v, updates %q", res, c.texts())
		}
		if res.Usage.Completion != 3 {
			t.Fatalf("usage %+v", res.Usage)
		}
	})
	t.Run("reported overrun is returned with ErrBudgetExceeded", func(t *testing.T) {
		// Two tokens per delta: within 3 deltas, but 6 tokens by the
		// server's own count.
		srv := newChatServer(t, func(w http.ResponseWriter, _ *http.Request) {
			sendEvents(w, chunk("aa", ""), chunk("bb", ""), chunk("cc", "stop"), usageChunk(9, 6), "[DONE]")
		})
		res, err := srv.executor().Execute(context.Background(), Task{Text: "x", BudgetTokens: 3}, nil)
		if !errors.Is(err, ErrBudgetExceeded) {
			t.Fatalf("err = %v, want ErrBudgetExceeded", err)
		}
		if res.Text != "aabbcc" || res.Usage != (Usage{Prompt: 9, Completion: 6, Total: 15}) {
			t.Fatalf("result %+v: usage must be the server's, unaltered", res)
		}
	})
}

// Servers that send no usage chunk (older llama.cpp builds) get estimates,
// and a stream with a finish reason but no [DONE] is complete.
func TestOpenAIWithoutUsage(t *testing.T) {
	srv := newChatServer(t, func(w http.ResponseWriter, _ *http.Request) {
		sendEvents(w, chunk("Hi", ""), chunk(" there", ""), chunk("", "stop"))
	})
	o := srv.executor()
	o.System = "sys"
	res, err := o.Execute(context.Background(), Task{Text: "hello world!"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{Prompt: 1 + 3, Completion: 2}
	want.Total = want.Prompt + want.Completion
	if res.Text != "Hi there" || res.Usage != want {
		t.Fatalf("result %+v, want usage %+v", res, want)
	}
}

func TestOpenAINonStreamingServer(t *testing.T) {
	srv := newChatServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		io.WriteString(w, `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,`+
			`"message":{"role":"assistant","content":"whole answer"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}`)
	})
	var c collector
	res, err := srv.executor().Execute(context.Background(), Task{Text: "x"}, c.emit)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "whole answer" || res.Usage.Total != 6 || c.joined() != res.Text {
		t.Fatalf("result %+v", res)
	}
}

func TestOpenAIUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, err := OpenAI{BaseURL: url, Model: "m"}.Execute(context.Background(), Task{Text: "x"}, nil)
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("err = %v, want ErrFailed", err)
	}
	if _, err := (OpenAI{}).Execute(context.Background(), Task{}, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("unconfigured: err = %v", err)
	}
}
