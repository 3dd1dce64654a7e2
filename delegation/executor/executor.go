package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Task is one unit of work handed to an executor.
type Task struct {
	// Text is the task's text parts joined with "\n".
	Text string
	// Data holds the task's JSON data parts unchanged. Only in-process
	// handlers see them: a command's stdin and a chat prompt have no
	// faithful place for structured input, and guessing a format would be
	// worse than leaving it to a handler that knows.
	Data [][]byte
	// BudgetTokens is a hard cap on completion tokens. Zero means the
	// requester named none; the core replaces that with the profile's
	// maximum before calling, so zero reaching an executor means no cap
	// (Exec still honours its MaxOutput).
	BudgetTokens uint64
	// ContextID groups the tasks of one conversation.
	ContextID string
	// History is the context's earlier turns, oldest first (contexts: see
	// docs/contexts.md): what the provider kept of this requester's
	// context, or what the requester carried when the context moved here.
	// Empty without a context, or for its first turn.
	History []Turn
	// Exchanges are the earlier turns of this multi-turn task (protocol
	// 1.3), oldest first: each question the executor asked (Result.Input)
	// and the requester's answer. Empty on the first call; the executor is
	// called again, with one more, each time an answer comes. BudgetTokens
	// is then what the earlier turns left of the task's budget. (History,
	// above, is the context's earlier delegations; these are this one's.)
	Exchanges []Exchange
}

// Exchange is one question of a multi-turn task and its answer.
type Exchange struct {
	Question string // what the executor asked (InputRequest.Question)
	Resume   []byte // what it kept with the question (InputRequest.Resume)
	Answer   string // the requester's answer: its text parts joined with "\n"
	// AnswerData holds the answer's JSON data parts (handlers only, as
	// Task.Data).
	AnswerData [][]byte
}

// Turn is one earlier delegation of a task's context: its task (text
// and JSON data parts, as in Task) and the text of its result. Its JSON
// form is the one docs/contexts.md documents.
type Turn struct {
	Profile string            `json:"profile,omitempty"`
	Task    string            `json:"task"`
	Data    []json.RawMessage `json:"data,omitempty"`
	Result  string            `json:"result"`
}

// InputRequest pauses a task to ask its requester a question (the A2A
// input-required state). While the answer is awaited nothing runs: the
// executor has returned, and the provider holds no slot or VRAM for it.
type InputRequest struct {
	Question string
	// Resume is what the executor needs to go on (a remote agent's task
	// ID, say): kept durably with the question, never sent to the
	// requester, and handed back in the next call's last Exchange. At most
	// MaxResume bytes.
	Resume []byte
}

// Limits on an InputRequest: a question longer than MaxQuestion bytes is
// cut, a Resume longer than MaxResume fails the task.
const (
	MaxQuestion = 64 << 10
	MaxResume   = 4 << 10
)

// AskInput is the Result of a handler that needs an answer before it can
// go on: the task pauses with question, and the handler is called again
// with the answer in Task.Exchanges.
func AskInput(question string) Result {
	return Result{Input: &InputRequest{Question: question}}
}

// Update is a piece of streamed output. For Echo, Exec and OpenAI the
// Update texts, concatenated, are exactly Result.Text.
type Update struct {
	Text string
	// Progress is in [0, 1], or -1 when the executor cannot tell.
	Progress float64
}

// Usage counts tokens the way OpenAI-compatible servers report them.
type Usage struct {
	Prompt, Completion, Total uint64
}

// Result is a finished task's output.
type Result struct {
	Text  string
	Usage Usage
	// StoppedAtBudget is set when output was cut at the token budget, so a
	// requester can tell a complete answer from a truncated one.
	StoppedAtBudget bool
	// Input, when set, pauses the task rather than ending it (see
	// InputRequest): Text and Usage are then this turn's. A provider whose
	// requester cannot answer (it did not offer a multi-turn delegation)
	// fails the task instead.
	Input *InputRequest
}

// checkInput makes an input request fit its limits: the question valid
// UTF-8 and at most MaxQuestion bytes; a Resume too large is an error.
func checkInput(where string, res *Result) error {
	if res.Input == nil {
		return nil
	}
	in := *res.Input
	in.Question = truncateUTF8(strings.ToValidUTF8(in.Question, "\uFFFD"), MaxQuestion)
	if len(in.Resume) > MaxResume {
		return fmt.Errorf("%s: %w: resume state of %d bytes, at most %d", where, ErrFailed, len(in.Resume), MaxResume)
	}
	res.Input = &in
	return nil
}

// turnInput is what a call brings that the earlier ones did not: the task
// on a first call, the answer on a continuing one. Estimated usage counts
// it as the prompt.
func turnInput(task Task) string {
	if t := lastTurn(task); t != nil {
		return t.Answer
	}
	return task.Text
}

// lastTurn is the exchange a continuing call answers, or nil on a first
// call.
func lastTurn(task Task) *Exchange {
	if len(task.Exchanges) == 0 {
		return nil
	}
	return &task.Exchanges[len(task.Exchanges)-1]
}

// Executor runs tasks for one profile. Execute streams partial output
// through emit (which may be nil) and stops when ctx is done, returning an
// error that wraps ctx.Err(). See the package comment for the contract.
type Executor interface {
	Execute(ctx context.Context, task Task, emit func(Update)) (Result, error)
}

var (
	// ErrFailed reports that the work itself failed: a command exited
	// non-zero, a server answered with an error, a stream was malformed or
	// too large, or the executor is misconfigured.
	ErrFailed = errors.New("executor: task failed")
	// ErrBudgetExceeded reports that a backend's own usage report exceeds
	// the task's budget. The Result beside it is complete and honest.
	ErrBudgetExceeded = errors.New("executor: reported usage exceeds the token budget")
)

// bytesPerToken is the estimator's ratio: about four bytes of English text
// per token for the BPE vocabularies of common open models. It is a
// budgeting guard, not a tokenizer.
const bytesPerToken = 4

// EstimateTokens approximates the number of tokens in s as one per four
// bytes, rounded up, so any non-empty string counts at least one. It is the
// accounting used wherever a backend reports no usage, and the inverse of
// the byte limit those executors apply: output of at most 4×BudgetTokens
// bytes never estimates above the budget.
func EstimateTokens(s string) uint64 {
	return (uint64(len(s)) + bytesPerToken - 1) / bytesPerToken
}

// budgetBytes is the most output, in bytes, that fits a budget under
// EstimateTokens; no budget (zero) and budgets too large to matter give
// math.MaxInt.
func budgetBytes(tokens uint64) int {
	if tokens == 0 || tokens > math.MaxInt/bytesPerToken {
		return math.MaxInt
	}
	return int(tokens) * bytesPerToken
}

// estimatedUsage counts prompt and completion with EstimateTokens.
func estimatedUsage(prompt, completion string) Usage {
	p, c := EstimateTokens(prompt), EstimateTokens(completion)
	return Usage{Prompt: p, Completion: c, Total: p + c}
}

// truncateUTF8 cuts s to at most n bytes without splitting a rune, so the
// result stays valid UTF-8 when s is.
func truncateUTF8(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	for i := n; i > 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n] // not UTF-8 to begin with; any cut is as good
}

// oneLine makes text from a command or a server fit in an error message:
// trimmed, valid UTF-8, newlines shown as \n and other control characters
// replaced, so a log line stays one line whatever the backend printed.
func oneLine(s string) string {
	s = strings.ToValidUTF8(strings.TrimSpace(s), "\uFFFD")
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", `\n`)
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}

// nopEmit stands in for a nil emit so executors need no nil checks.
func nopEmit(Update) {}

func orNop(emit func(Update)) func(Update) {
	if emit == nil {
		return nopEmit
	}
	return emit
}

// orDefault returns v, or def when v is not positive.
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// PeerError is a failure whose message is meant for the requester. Errors
// of executors name local commands, paths and URLs, so a provider tells
// its peers only that the executor failed and keeps the detail in its own
// log and store; a Go handler that wants to say why returns a PeerError
// (Tell), whose message the requester then sees.
type PeerError struct{ Msg string }

func (e *PeerError) Error() string { return e.Msg }

// Tell returns a PeerError with the formatted message.
func Tell(format string, args ...any) error {
	return &PeerError{Msg: fmt.Sprintf(format, args...)}
}

// PeerMessage is the part of err a requester may see: a PeerError's message
// (one line, at most 200 bytes), or "" when err carries none.
func PeerMessage(err error) string {
	var pe *PeerError
	if !errors.As(err, &pe) {
		return ""
	}
	return truncateUTF8(oneLine(pe.Msg), 200)
}
