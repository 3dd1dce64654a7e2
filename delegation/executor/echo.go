package executor

import (
	"context"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Echo returns the task's text as its result, streamed back as it goes.
// It is the executor of the demo profile: it exercises delegation end to end
// without a model.
type Echo struct {
	// Delay is waited before each word, so a demo shows streaming and a
	// test can cancel mid-task. Zero streams the text at once, in pieces of
	// EchoChunk bytes: one update per word would cost a large task more
	// in bookkeeping than in bytes.
	Delay time.Duration
}

// EchoChunk is the most text one update of an Echo without Delay carries.
const EchoChunk = 64 << 10

var _ Executor = Echo{}

// Execute streams task.Text, cut to the budget, word by word (with a
// Delay) or in chunks (without).
func (e Echo) Execute(ctx context.Context, task Task, emit func(Update)) (Result, error) {
	emit = orNop(emit)
	text := truncateUTF8(task.Text, budgetBytes(task.BudgetTokens))
	done := 0
	for done < len(text) {
		if err := sleep(ctx, e.Delay); err != nil {
			return Result{Text: text[:done], Usage: estimatedUsage(task.Text, text[:done])},
				fmt.Errorf("echo: %w", err)
		}
		n := done + nextWord(text[done:])
		if e.Delay <= 0 {
			n = done + max(len(truncateUTF8(text[done:], EchoChunk)), 1)
		}
		emit(Update{Text: text[done:n], Progress: float64(n) / float64(len(text))})
		done = n
	}
	return Result{
		Text:            text,
		Usage:           estimatedUsage(task.Text, text),
		StoppedAtBudget: len(text) < len(task.Text),
	}, nil
}

// nextWord returns the length of s's first word with the whitespace around
// it, so that the streamed pieces concatenate back to the exact text.
func nextWord(s string) int {
	i := 0
	for _, stopAtSpace := range []bool{false, true, false} {
		for i < len(s) {
			r, size := utf8.DecodeRuneInString(s[i:])
			if unicode.IsSpace(r) == stopAtSpace {
				break
			}
			i += size
		}
	}
	return i
}

// sleep waits d or until ctx is done, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
