package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// HandlerFunc is a Go function registered in-process as a profile's
// executor. It is the only executor that sees Task.Data.
//
// The adapter holds a handler to the same contract as every other
// executor: it drops emits after the handler returns and serialises
// concurrent ones, replaces invalid UTF-8, cuts streamed and final text at
// the budget (also in a partial result returned with an error), estimates
// usage the handler leaves at zero, turns a panic into ErrFailed (a
// handler's bug must not take down a node serving its peers) and wraps any
// other error in ErrFailed. A handler must itself return when ctx is done:
// the adapter cannot stop a goroutine it does not own.
type HandlerFunc func(ctx context.Context, task Task, emit func(Update)) (Result, error)

var _ Executor = HandlerFunc(nil)

// Execute runs f under the executor contract.
func (f HandlerFunc) Execute(ctx context.Context, task Task, emit func(Update)) (res Result, err error) {
	g := &emitGuard{emit: orNop(emit), room: budgetBytes(task.BudgetTokens)}
	defer g.close()
	defer func() {
		if p := recover(); p != nil {
			res, err = Result{}, fmt.Errorf("handler: %w: panic: %v", ErrFailed, p)
		}
	}()
	res, err = f(ctx, task, g.send)
	res.Text = strings.ToValidUTF8(res.Text, "\uFFFD")
	if err == nil {
		err = checkInput("handler", &res)
	}
	res, budgetErr := enforceBudget(task, res)
	if err != nil {
		res.Input = nil
		return res, classify("handler", err)
	}
	return res, budgetErr
}

// enforceBudget applies the budget to a handler's result. Usage the handler
// reports is kept as reported; an over-budget report is returned with
// ErrBudgetExceeded rather than trimmed, since only the handler knows what
// it really spent.
func enforceBudget(task Task, res Result) (Result, error) {
	if res.Usage.Completion != 0 {
		if res.Usage.Total == 0 {
			res.Usage.Total = res.Usage.Prompt + res.Usage.Completion
		}
		if b := task.BudgetTokens; b > 0 && res.Usage.Completion > b {
			return res, fmt.Errorf("handler: %w: reported %d completion tokens for a budget of %d",
				ErrBudgetExceeded, res.Usage.Completion, b)
		}
		return res, nil
	}
	if cut := truncateUTF8(res.Text, budgetBytes(task.BudgetTokens)); len(cut) < len(res.Text) {
		res.Text, res.StoppedAtBudget = cut, true
	}
	prompt := res.Usage.Prompt
	completion := res.Text
	if res.Input != nil {
		completion += res.Input.Question
	}
	res.Usage = estimatedUsage(turnInput(task), completion)
	if prompt != 0 {
		res.Usage.Prompt, res.Usage.Total = prompt, prompt+res.Usage.Completion
	}
	return res, nil
}

// classify prefixes err with where it came from and makes it test as one
// of the contract's kinds: context errors and the sentinels keep their
// identity, anything else becomes a failure (still wrapping the original).
func classify(where string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, ErrFailed), errors.Is(err, ErrBudgetExceeded):
		return fmt.Errorf("%s: %w", where, err)
	}
	return fmt.Errorf("%s: %w: %w", where, ErrFailed, err)
}

// emitGuard stands between a handler and the core's emit. Handlers may
// start goroutines of their own; the guard keeps their late or concurrent
// emits from reaching a caller that was promised neither.
type emitGuard struct {
	mu     sync.Mutex
	emit   func(Update)
	room   int  // bytes of streamed text still within the budget
	full   bool // the budget cut an update; later text would leave a gap
	closed bool
}

func (g *emitGuard) send(u Update) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.full {
		return
	}
	u.Text = strings.ToValidUTF8(u.Text, "\uFFFD")
	if len(u.Text) > g.room {
		u.Text, g.full = truncateUTF8(u.Text, g.room), true
		if u.Text == "" {
			return
		}
	}
	g.room -= len(u.Text)
	g.emit(u)
}

func (g *emitGuard) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
