package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// OpenAI runs tasks on an OpenAI-compatible chat completions endpoint
// (Ollama, vLLM, llama.cpp's server, or a hosted API), streaming tokens as
// Updates.
//
// The budget goes to the server as max_tokens, and is enforced again on
// the stream: a server that keeps streaming past it is cut off. Usage comes
// from the server's final usage chunk (requested with include_usage);
// servers that send none are estimated.
type OpenAI struct {
	// BaseURL is the API root, e.g. http://127.0.0.1:11434/v1.
	BaseURL string
	// Model is the model name the server knows.
	Model string
	// APIKey, when set, is sent as a bearer token.
	APIKey string
	// Client sends the request; nil means http.DefaultClient. It needs no
	// Timeout: ctx bounds the exchange, and a Timeout would cut long
	// generations short.
	Client *http.Client
	// System, when set, is sent as the system message.
	System string
	// MaxResponseBytes caps the response body; zero means 32 MiB. With
	// JSON framing around every token, a budget of B tokens needs roughly
	// B×300 bytes.
	MaxResponseBytes int64
}

var _ Executor = OpenAI{}

const (
	defaultMaxResponseBytes = 32 << 20
	errorSnippetBytes       = 512
)

type chatRequest struct {
	Model         string        `json:"model"`
	Messages      []chatMessage `json:"messages"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
	MaxTokens     uint64        `json:"max_tokens,omitempty"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Execute sends task as one user message and streams the answer.
func (o OpenAI) Execute(ctx context.Context, task Task, emit func(Update)) (Result, error) {
	if o.BaseURL == "" || o.Model == "" {
		return Result{}, fmt.Errorf("openai: %w: BaseURL and Model must be set", ErrFailed)
	}
	req := chatRequest{
		Model:         o.Model,
		Stream:        true,
		StreamOptions: streamOptions{IncludeUsage: true},
		MaxTokens:     task.BudgetTokens,
	}
	if o.System != "" {
		req.Messages = append(req.Messages, chatMessage{Role: "system", Content: o.System})
	}
	req.Messages = append(req.Messages, chatMessage{Role: "user", Content: task.Text})
	body, err := json.Marshal(req)
	if err != nil {
		return Result{}, fmt.Errorf("openai %s: %w: %v", o.Model, ErrFailed, err)
	}
	url := strings.TrimRight(o.BaseURL, "/") + "/chat/completions"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("openai %s: %w: %v", o.Model, ErrFailed, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if o.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+o.APIKey)
	}
	client := o.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return Result{}, o.fail(ctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Result{}, fmt.Errorf("openai %s: %w: HTTP %d from %s: %s", o.Model, ErrFailed,
			resp.StatusCode, url, errorBody(resp.Body))
	}

	c := &completion{budget: task.BudgetTokens, emit: orNop(emit)}
	limit := orDefault(o.MaxResponseBytes, defaultMaxResponseBytes)
	r := &capReader{r: resp.Body, left: limit, limit: limit}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		// A server or proxy that ignores "stream" answers with one
		// chat.completion; accept it rather than fail a working setup.
		var data []byte
		if data, err = io.ReadAll(r); err == nil {
			_, err = c.apply(data)
		}
	} else {
		err = c.readStream(r)
	}
	res := o.result(task, c)
	if err != nil {
		return res, o.fail(ctx, err)
	}
	if u := c.usage; u != nil && task.BudgetTokens > 0 && u.Completion > task.BudgetTokens {
		return res, fmt.Errorf("openai %s: %w: server reported %d completion tokens for a budget of %d",
			o.Model, ErrBudgetExceeded, u.Completion, task.BudgetTokens)
	}
	return res, nil
}

func (o OpenAI) result(task Task, c *completion) Result {
	res := Result{
		Text: c.text.String(),
		// "length" with a budget means the server stopped at max_tokens.
		StoppedAtBudget: c.stoppedAtBudget || (task.BudgetTokens > 0 && c.finish == "length"),
	}
	if c.usage != nil {
		res.Usage = *c.usage
		if res.Usage.Total == 0 {
			res.Usage.Total = res.Usage.Prompt + res.Usage.Completion
		}
		return res
	}
	// Each content delta is at least one token, so pieces is a floor the
	// estimate must not undercut. Above the budget the estimate is only a
	// guess about a server that was told max_tokens and whose deltas stayed
	// within it (add enforces that), so it cannot prove a violation.
	prompt := EstimateTokens(o.System) + EstimateTokens(task.Text)
	completion := max(EstimateTokens(res.Text), c.pieces)
	if b := task.BudgetTokens; b > 0 && completion > b {
		completion = b
	}
	res.Usage = Usage{Prompt: prompt, Completion: completion, Total: prompt + completion}
	return res
}

// errorBody summarises an error response: the message of an OpenAI-style
// {"error": ...} body, else the start of the body itself.
func errorBody(body io.Reader) string {
	snippet, _ := io.ReadAll(io.LimitReader(body, errorSnippetBytes))
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(snippet, &e) == nil {
		if msg := errorText(e.Error); msg != "" {
			return oneLine(msg)
		}
	}
	return oneLine(string(snippet))
}

// fail wraps err, preferring ctx's error: once ctx is done, a read error is
// only the symptom of the cancellation.
func (o OpenAI) fail(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("openai %s: %w", o.Model, ctxErr)
	}
	return classify("openai "+o.Model, err)
}

// capReader fails, rather than stopping quietly, once more than left bytes
// arrive: a silently truncated stream would pass for a finished one.
type capReader struct {
	r           io.Reader
	left, limit int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// At the cap exactly: only a body that goes on is too large.
		var probe [1]byte
		if n, err := c.r.Read(probe[:]); n == 0 {
			return 0, err
		}
		return 0, fmt.Errorf("%w: response larger than %d bytes", ErrFailed, c.limit)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
