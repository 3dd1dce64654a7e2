package executor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// maxEventBytes caps one server-sent event line and one event's data. A
// chunk carries a token or a few; a megabyte is far beyond any honest one.
const maxEventBytes = 1 << 20

// eventScanner splits a text/event-stream body into the data of its events,
// following the WHATWG rules that OpenAI-compatible servers rely on: lines
// end in LF or CRLF, a blank line ends an event, "data:" lines (one optional
// space after the colon) are joined with "\n", comments and other fields
// are ignored.
type eventScanner struct {
	sc   *bufio.Scanner
	data []byte
}

func newEventScanner(r io.Reader) *eventScanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	return &eventScanner{sc: sc}
}

// next returns the data of the next event, valid until the following call,
// or io.EOF. An event cut off by the end of the body is still returned: a
// server that forgets the last blank line should not lose its last chunk,
// and a truncated one fails to parse anyway.
func (e *eventScanner) next() ([]byte, error) {
	e.data = e.data[:0]
	have := false
	for e.sc.Scan() {
		line := e.sc.Bytes()
		if len(line) == 0 {
			if have {
				return e.data, nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" { // also skips ":" comments
			continue
		}
		if have {
			e.data = append(e.data, '\n')
		}
		e.data = append(e.data, bytes.TrimPrefix(value, []byte(" "))...)
		have = true
		if len(e.data) > maxEventBytes {
			return nil, fmt.Errorf("%w: stream event larger than %d bytes", ErrFailed, maxEventBytes)
		}
	}
	if err := e.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%w: stream line longer than %d bytes", ErrFailed, maxEventBytes)
		}
		return nil, err
	}
	if have {
		return e.data, nil
	}
	return nil, io.EOF
}

// chatChunk is the part of a chat.completion.chunk (or, for servers that
// ignore "stream", a chat.completion) that kith reads.
type chatChunk struct {
	Choices []struct {
		Index        int     `json:"index"`
		Delta        message `json:"delta"`
		Message      message `json:"message"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     uint64 `json:"prompt_tokens"`
		CompletionTokens uint64 `json:"completion_tokens"`
		TotalTokens      uint64 `json:"total_tokens"`
	} `json:"usage"`
	// Error is how Ollama and vLLM report a failure after the 200 status
	// has gone out: an object with a message, or occasionally a string.
	Error json.RawMessage `json:"error"`
}

type message struct {
	Content string `json:"content"`
}

// errorText extracts a server error's message, or "" when there is none.
func errorText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		return obj.Message
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s
	}
	return string(raw)
}

// completion accumulates a streamed chat completion under a token budget.
type completion struct {
	budget uint64
	emit   func(Update)

	text strings.Builder
	// pieces counts content-bearing deltas. A server streams whole tokens,
	// so this is a lower bound on completion tokens however it batches
	// them: more pieces than the budget proves it ignored max_tokens.
	pieces          uint64
	usage           *Usage
	finish          string
	stoppedAtBudget bool
}

// add takes one delta's content; it reports false once the budget is
// spent, and the stream should be abandoned.
func (c *completion) add(content string) bool {
	if content == "" {
		return true
	}
	if c.budget > 0 && c.pieces >= c.budget {
		c.stoppedAtBudget = true
		return false
	}
	c.pieces++
	c.text.WriteString(content)
	c.emit(Update{Text: content, Progress: -1})
	return true
}

// apply folds one decoded chunk in; it reports false when reading should
// stop.
func (c *completion) apply(data []byte) (bool, error) {
	var ch chatChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return false, fmt.Errorf("%w: malformed stream chunk: %v", ErrFailed, err)
	}
	if msg := errorText(ch.Error); msg != "" {
		return false, fmt.Errorf("%w: server error: %s", ErrFailed, oneLine(truncateUTF8(msg, errorSnippetBytes)))
	}
	if u := ch.Usage; u != nil {
		c.usage = &Usage{Prompt: u.PromptTokens, Completion: u.CompletionTokens, Total: u.TotalTokens}
	}
	for _, choice := range ch.Choices {
		if choice.Index != 0 {
			continue // kith asks for one choice; ignore any extras
		}
		if !c.add(choice.Delta.Content + choice.Message.Content) {
			return false, nil
		}
		if choice.FinishReason != nil && *choice.FinishReason != "" {
			c.finish = *choice.FinishReason
		}
	}
	return true, nil
}

// readStream feeds an event stream into c until "[DONE]", the budget, or
// an error. A stream that ends without "[DONE]" is accepted only if a
// finish reason came: some llama.cpp builds omit "[DONE]", but a stream
// with neither was cut off.
func (c *completion) readStream(r io.Reader) error {
	events := newEventScanner(r)
	for {
		data, err := events.next()
		if errors.Is(err, io.EOF) {
			if c.finish == "" {
				return fmt.Errorf("%w: stream ended before [DONE]", ErrFailed)
			}
			return nil
		}
		if err != nil {
			return err
		}
		data = bytes.TrimSpace(data)
		switch {
		case string(data) == "[DONE]":
			return nil
		case len(data) == 0:
			continue // keep-alive
		}
		more, err := c.apply(data)
		if err != nil || !more {
			return err
		}
	}
}
