package executor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// collector records Updates; emit is called from Execute's goroutine, but
// the lock keeps the race detector honest about tests that read elsewhere.
type collector struct {
	mu      sync.Mutex
	updates []Update
}

func (c *collector) emit(u Update) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates = append(c.updates, u)
}

func (c *collector) texts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, u := range c.updates {
		out = append(out, u.Text)
	}
	return out
}

func (c *collector) joined() string { return strings.Join(c.texts(), "") }

func TestEstimateTokens(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"", 0},
		{"a", 1},
		{"abcd", 1},
		{"abcde", 2},
		{strings.Repeat("x", 400), 100},
		{"€", 1}, // three bytes
	} {
		if got := EstimateTokens(tc.in); got != tc.want {
			t.Errorf("EstimateTokens(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// Output cut to budgetBytes never estimates above the budget.
func TestBudgetBytesMatchesEstimate(t *testing.T) {
	for b := uint64(1); b < 50; b++ {
		s := strings.Repeat("y", budgetBytes(b))
		if EstimateTokens(s) != b || EstimateTokens(s+"y") != b+1 {
			t.Fatalf("budget %d: %d bytes estimate %d", b, len(s), EstimateTokens(s))
		}
	}
}

func TestTruncateUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 3, "hel"},
		{"hello", 0, ""},
		{"a€b", 2, "a"}, // never half a rune
		{"a€b", 3, "a"},
		{"a€b", 4, "a€"},
	} {
		got := truncateUTF8(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("truncateUTF8(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestEcho(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		budget     uint64
		want       string
		stopped    bool
		updates    []string
		delay      time.Duration
	}{
		{name: "whole", text: "hello kith mesh", want: "hello kith mesh",
			updates: []string{"hello kith mesh"}},
		{name: "by word", text: "hello kith mesh", want: "hello kith mesh", delay: time.Nanosecond,
			updates: []string{"hello ", "kith ", "mesh"}},
		{name: "spacing kept", text: "  two\n\nlines ", want: "  two\n\nlines ", delay: time.Nanosecond,
			updates: []string{"  two\n\n", "lines "}},
		{name: "budget", text: "hello kith mesh", budget: 2, want: "hello ki", stopped: true, delay: time.Nanosecond,
			updates: []string{"hello ", "ki"}},
		{name: "budget fits", text: "hello", budget: 2, want: "hello",
			updates: []string{"hello"}},
		{name: "empty", text: "", want: ""},
		{name: "chunks", text: strings.Repeat("é", EchoChunk) + "x", want: strings.Repeat("é", EchoChunk) + "x",
			updates: []string{strings.Repeat("é", EchoChunk/2), strings.Repeat("é", EchoChunk/2), "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c collector
			res, err := Echo{Delay: tc.delay}.Execute(context.Background(), Task{Text: tc.text, BudgetTokens: tc.budget}, c.emit)
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != tc.want || res.StoppedAtBudget != tc.stopped {
				t.Fatalf("got %q stopped=%v, want %q stopped=%v", res.Text, res.StoppedAtBudget, tc.want, tc.stopped)
			}
			if got := c.texts(); strings.Join(got, "|") != strings.Join(tc.updates, "|") {
				t.Fatalf("updates %q, want %q", got, tc.updates)
			}
			if tc.budget > 0 && res.Usage.Completion > tc.budget {
				t.Fatalf("completion %d over budget %d", res.Usage.Completion, tc.budget)
			}
			want := Usage{Prompt: EstimateTokens(tc.text), Completion: EstimateTokens(tc.want)}
			want.Total = want.Prompt + want.Completion
			if res.Usage != want {
				t.Fatalf("usage %+v, want %+v", res.Usage, want)
			}
			if n := len(c.updates); n > 0 && c.updates[n-1].Progress != 1 {
				t.Fatalf("last progress %v, want 1", c.updates[n-1].Progress)
			}
		})
	}
}

func TestEchoCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var c collector
	emit := func(u Update) {
		c.emit(u)
		cancel() // after the first word
	}
	start := time.Now()
	res, err := Echo{Delay: 20 * time.Millisecond}.Execute(ctx, Task{Text: strings.Repeat("word ", 1000)}, emit)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if res.Text != "word " || c.joined() != res.Text {
		t.Fatalf("partial result %q, updates %q", res.Text, c.texts())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestHandlerFunc(t *testing.T) {
	ctx := context.Background()
	t.Run("passes the task through", func(t *testing.T) {
		var got Task
		h := HandlerFunc(func(_ context.Context, task Task, emit func(Update)) (Result, error) {
			got = task
			emit(Update{Text: "partial", Progress: 0.5})
			return Result{Text: "done", Usage: Usage{Prompt: 3, Completion: 2}}, nil
		})
		task := Task{Text: "t", Data: [][]byte{[]byte(`{"k":1}`)}, BudgetTokens: 10, ContextID: "ctx-1"}
		var c collector
		res, err := h.Execute(ctx, task, c.emit)
		if err != nil {
			t.Fatal(err)
		}
		if got.ContextID != "ctx-1" || string(got.Data[0]) != `{"k":1}` || got.BudgetTokens != 10 {
			t.Fatalf("handler saw %+v", got)
		}
		if res.Usage != (Usage{Prompt: 3, Completion: 2, Total: 5}) {
			t.Fatalf("usage %+v", res.Usage)
		}
		if len(c.updates) != 1 || c.updates[0] != (Update{Text: "partial", Progress: 0.5}) {
			t.Fatalf("updates %+v", c.updates)
		}
	})
	t.Run("estimates and cuts at the budget", func(t *testing.T) {
		h := HandlerFunc(func(_ context.Context, _ Task, emit func(Update)) (Result, error) {
			emit(Update{Text: "abcdef"})
			emit(Update{Text: "ghijkl"}) // crosses 8 bytes = 2 tokens
			emit(Update{Text: "mn"})     // dropped: would leave a gap
			return Result{Text: "abcdefghijklmn"}, nil
		})
		var c collector
		res, err := h.Execute(ctx, Task{Text: "prompt", BudgetTokens: 2}, c.emit)
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != "abcdefgh" || !res.StoppedAtBudget || res.Usage.Completion != 2 || res.Usage.Prompt != 2 {
			t.Fatalf("result %+v", res)
		}
		if c.joined() != "abcdefgh" {
			t.Fatalf("updates %q", c.texts())
		}
	})
	t.Run("reported usage over budget is flagged, not hidden", func(t *testing.T) {
		h := HandlerFunc(func(context.Context, Task, func(Update)) (Result, error) {
			return Result{Text: "x", Usage: Usage{Completion: 50}}, nil
		})
		res, err := h.Execute(ctx, Task{BudgetTokens: 10}, nil)
		if !errors.Is(err, ErrBudgetExceeded) || res.Usage.Completion != 50 {
			t.Fatalf("res %+v err %v", res, err)
		}
	})
	t.Run("errors are classified", func(t *testing.T) {
		plain := errors.New("disk on fire")
		for _, tc := range []struct {
			ret  error
			want []error
		}{
			{plain, []error{ErrFailed, plain}},
			{context.Canceled, []error{context.Canceled}},
			{ErrBudgetExceeded, []error{ErrBudgetExceeded}},
		} {
			h := HandlerFunc(func(context.Context, Task, func(Update)) (Result, error) { return Result{}, tc.ret })
			_, err := h.Execute(ctx, Task{}, nil)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("returned %v: got %v, want it to wrap %v", tc.ret, err, w)
				}
			}
		}
	})
	t.Run("panic becomes ErrFailed", func(t *testing.T) {
		h := HandlerFunc(func(context.Context, Task, func(Update)) (Result, error) { panic("boom") })
		_, err := h.Execute(ctx, Task{}, nil)
		if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("invalid UTF-8 is replaced", func(t *testing.T) {
		h := HandlerFunc(func(_ context.Context, _ Task, emit func(Update)) (Result, error) {
			emit(Update{Text: "a\xffb"})
			return Result{Text: "c\xffd"}, nil
		})
		var c collector
		res, err := h.Execute(ctx, Task{}, c.emit)
		if err != nil || res.Text != "c\uFFFDd" || c.joined() != "a\uFFFDb" {
			t.Fatalf("result %q, updates %q, err %v", res.Text, c.texts(), err)
		}
	})
	t.Run("concurrent emits are serialised", func(t *testing.T) {
		h := HandlerFunc(func(_ context.Context, _ Task, emit func(Update)) (Result, error) {
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 100 {
						emit(Update{Text: "x"})
					}
				})
			}
			wg.Wait()
			return Result{}, nil
		})
		var inFlight, overlaps, n int // touched only under the guard's lock, if it holds one
		emit := func(Update) {
			inFlight++
			if inFlight > 1 {
				overlaps++
			}
			n++
			inFlight--
		}
		if _, err := h.Execute(ctx, Task{}, emit); err != nil {
			t.Fatal(err)
		}
		if overlaps != 0 || n != 800 {
			t.Fatalf("%d overlapping emits, %d delivered", overlaps, n)
		}
	})
	t.Run("no emit after return", func(t *testing.T) {
		leaked := make(chan func(Update), 1)
		h := HandlerFunc(func(_ context.Context, _ Task, emit func(Update)) (Result, error) {
			leaked <- emit
			return Result{}, nil
		})
		var c collector
		if _, err := h.Execute(ctx, Task{}, c.emit); err != nil {
			t.Fatal(err)
		}
		(<-leaked)(Update{Text: "late"})
		if len(c.updates) != 0 {
			t.Fatalf("late emit delivered: %+v", c.updates)
		}
	})
}

// TestHandlerAskInput: a handler's question comes back as Result.Input
// (cut to MaxQuestion, valid UTF-8, counted in usage); a Resume over
// MaxResume fails; the next call sees the turn and the remaining budget.
func TestHandlerAskInput(t *testing.T) {
	h := HandlerFunc(func(_ context.Context, task Task, _ func(Update)) (Result, error) {
		if len(task.Exchanges) == 0 {
			r := AskInput(strings.Repeat("?", MaxQuestion+10) + "\xff")
			return r, nil
		}
		return Result{Text: "got " + task.Exchanges[0].Answer}, nil
	})
	res, err := h.Execute(context.Background(), Task{Text: "t", BudgetTokens: 1 << 20}, nil)
	if err != nil || res.Input == nil {
		t.Fatalf("%+v %v", res, err)
	}
	if len(res.Input.Question) != MaxQuestion || !utf8.ValidString(res.Input.Question) {
		t.Fatalf("question of %d bytes", len(res.Input.Question))
	}
	if res.Usage.Completion < EstimateTokens(res.Input.Question) {
		t.Fatalf("usage %+v does not count the question", res.Usage)
	}
	res, err = h.Execute(context.Background(), Task{Text: "t", Exchanges: []Exchange{{Question: "q", Answer: "a"}}}, nil)
	if err != nil || res.Text != "got a" || res.Input != nil {
		t.Fatalf("second turn %+v %v", res, err)
	}
	big := HandlerFunc(func(context.Context, Task, func(Update)) (Result, error) {
		return Result{Input: &InputRequest{Question: "q", Resume: make([]byte, MaxResume+1)}}, nil
	})
	if res, err := big.Execute(context.Background(), Task{Text: "t"}, nil); !errors.Is(err, ErrFailed) || res.Input != nil {
		t.Fatalf("oversized resume: %+v %v", res, err)
	}
}
