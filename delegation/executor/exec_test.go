//go:build unix

package executor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
}

func TestExec(t *testing.T) {
	needTools(t, "cat", "tr", "sh", "printf")
	t.Parallel()
	for _, tc := range []struct {
		name    string
		command []string
		task    Task
		want    string
	}{
		{name: "cat", command: []string{"cat"}, task: Task{Text: "hello\nkith"}, want: "hello\nkith"},
		{name: "tr", command: []string{"tr", "a-z", "A-Z"}, task: Task{Text: "shout"}, want: "SHOUT"},
		{name: "no stdin read", command: []string{"sh", "-c", "echo ignored"},
			task: Task{Text: strings.Repeat("x", 1<<20)}, want: "ignored\n"},
		{name: "environment", command: []string{"sh", "-c", `printf '%s/%s/%s' "$KITH_BUDGET_TOKENS" "$KITH_CONTEXT_ID" "$EXTRA"`},
			task: Task{BudgetTokens: 99, ContextID: "c7"}, want: "99/c7/set"},
		{name: "context history", command: []string{"sh", "-c", `cat "$KITH_CONTEXT_HISTORY"`},
			task: Task{ContextID: "c7", History: []Turn{{Task: "q", Result: "a"}}},
			want: `{"context_id":"c7","turns":[{"task":"q","result":"a"}]}`},
		{name: "no history", command: []string{"sh", "-c", `printf '[%s]' "$KITH_CONTEXT_HISTORY"`},
			task: Task{ContextID: "c7"}, want: "[]"},
		{name: "invalid utf8", command: []string{"printf", `a\377b`}, want: "a\uFFFDb"},
		{name: "split rune", command: []string{"sh", "-c", `printf '\342'; sleep 0.1; printf '\202\254!'`}, want: "€!"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c collector
			e := Exec{Command: tc.command, Env: []string{"EXTRA=set"}}
			res, err := e.Execute(context.Background(), tc.task, c.emit)
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != tc.want {
				t.Fatalf("result %q, want %q", res.Text, tc.want)
			}
			if c.joined() != res.Text {
				t.Fatalf("updates %q do not add up to %q", c.texts(), res.Text)
			}
			for _, u := range c.updates {
				if !utf8.ValidString(u.Text) {
					t.Fatalf("update %q is not UTF-8", u.Text)
				}
			}
			if res.Usage.Completion != EstimateTokens(tc.want) || res.Usage.Prompt != EstimateTokens(tc.task.Text) {
				t.Fatalf("usage %+v", res.Usage)
			}
		})
	}
}

func TestExecDir(t *testing.T) {
	needTools(t, "pwd")
	dir := t.TempDir()
	res, err := Exec{Command: []string{"pwd"}, Dir: dir}.Execute(context.Background(), Task{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := filepath.EvalSymlinks(strings.TrimSpace(res.Text))
	want, _ := filepath.EvalSymlinks(dir)
	if got != want {
		t.Fatalf("ran in %q, want %q", got, want)
	}
}

func TestExecFailure(t *testing.T) {
	needTools(t, "sh")
	t.Parallel()
	res, err := Exec{Command: []string{"sh", "-c", "echo partial; echo oops >&2; exit 3"}}.
		Execute(context.Background(), Task{}, nil)
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("err = %v, want ErrFailed", err)
	}
	for _, want := range []string{"exit status 3", "oops"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if res.Text != "partial\n" {
		t.Errorf("partial output %q", res.Text)
	}
}

func TestExecStderrTail(t *testing.T) {
	needTools(t, "sh")
	t.Parallel()
	// 10 KiB of noise, then the line that matters.
	script := `i=0; while [ $i -lt 1000 ]; do echo noise-noise >&2; i=$((i+1)); done; echo 'the real reason' >&2; exit 1`
	_, err := Exec{Command: []string{"sh", "-c", script}}.Execute(context.Background(), Task{}, nil)
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "the real reason") {
		t.Fatalf("err = %v", err)
	}
	if len(err.Error()) > 4<<10 {
		t.Fatalf("error is %d bytes; stderr should be capped near 2 KiB", len(err.Error()))
	}
}

func TestExecNotFound(t *testing.T) {
	_, err := Exec{Command: []string{"/nonexistent/kith-test-binary"}}.Execute(context.Background(), Task{}, nil)
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("err = %v, want ErrFailed", err)
	}
	if _, err := (Exec{}).Execute(context.Background(), Task{}, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("empty command: err = %v, want ErrFailed", err)
	}
}

// alive reports whether pid is a live process. A zombie counts as dead: it
// is only waiting for its (re)parent to reap it, which in a container may
// never happen.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err == nil {
		i := bytes.LastIndexByte(stat, ')')
		return i < 0 || i+2 >= len(stat) || (stat[i+2] != 'Z' && stat[i+2] != 'X')
	}
	if _, statErr := os.Stat("/proc/self"); statErr == nil {
		return false // /proc works and the process is not in it
	}
	return syscall.Kill(pid, 0) == nil
}

// waitDead polls until pid is gone; signals are delivered asynchronously.
func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readPID waits for a script to write its background child's PID.
func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if s := strings.TrimSpace(string(b)); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("pid file %q: %v", b, err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("no pid file")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecCancel(t *testing.T) {
	needTools(t, "sh", "sleep")
	t.Parallel()
	for _, tc := range []struct {
		name   string
		script string // $1 is the pid file; the script writes its child's pid there
		grace  time.Duration
		limit  time.Duration
	}{
		{name: "sleep", script: `echo $$ > "$1"; exec sleep 30`, limit: time.Second},
		{name: "child of shell", script: `sleep 30 & echo $! > "$1"; wait`, limit: time.Second},
		{name: "ignores SIGTERM", script: `trap '' TERM; sleep 30 & echo $! > "$1"; wait`,
			grace: 200 * time.Millisecond, limit: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "pid")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				e := Exec{Command: []string{"sh", "-c", tc.script, "sh", pidFile}, KillGrace: tc.grace}
				_, err := e.Execute(ctx, Task{}, nil)
				done <- err
			}()
			pid := readPID(t, pidFile)
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v, want context.Canceled", err)
				}
				if d := time.Since(start); d > tc.limit {
					t.Fatalf("returned %v after cancel, want under %v", d, tc.limit)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Execute did not return after cancel")
			}
			waitDead(t, pid)
		})
	}
}

func TestExecTimeout(t *testing.T) {
	needTools(t, "sleep")
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Exec{Command: []string{"sleep", "30"}}.Execute(ctx, Task{}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want DeadlineExceeded", err)
	}
}

// Output streams while the command still runs: the update arrives before
// the command would exit on its own.
func TestExecStreams(t *testing.T) {
	needTools(t, "sh", "sleep")
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c collector
	emit := func(u Update) {
		c.emit(u)
		if strings.Contains(c.joined(), "first\n") {
			cancel()
		}
	}
	res, err := Exec{Command: []string{"sh", "-c", "echo first; exec sleep 30"}}.Execute(ctx, Task{}, emit)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want Canceled (the first line never streamed?)", err)
	}
	if res.Text != "first\n" {
		t.Fatalf("partial result %q", res.Text)
	}
}

// Processes a command leaves behind are killed when it exits, and do not
// hold Execute up even though they hold its stdout.
func TestExecKillsLeftovers(t *testing.T) {
	needTools(t, "sh", "sleep")
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	start := time.Now()
	res, err := Exec{Command: []string{"sh", "-c", `sleep 30 & echo $! > "$1"; echo done`, "sh", pidFile}}.
		Execute(context.Background(), Task{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "done\n" {
		t.Fatalf("result %q", res.Text)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
	waitDead(t, readPID(t, pidFile))
}

func TestExecBudget(t *testing.T) {
	needTools(t, "yes")
	t.Parallel()
	var c collector
	start := time.Now()
	res, err := Exec{Command: []string{"yes", "hello"}}.Execute(context.Background(), Task{BudgetTokens: 5}, c.emit)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("hello\n", 4)[:20]
	if res.Text != want || !res.StoppedAtBudget {
		t.Fatalf("result %q stopped=%v, want %q stopped", res.Text, res.StoppedAtBudget, want)
	}
	if res.Usage.Completion != 5 || c.joined() != want {
		t.Fatalf("usage %+v, updates %q", res.Usage, c.texts())
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestExecMaxOutput(t *testing.T) {
	needTools(t, "yes")
	t.Parallel()
	res, err := Exec{Command: []string{"yes"}, MaxOutput: 1000}.Execute(context.Background(), Task{}, nil)
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "1000 bytes") {
		t.Fatalf("err = %v", err)
	}
	if len(res.Text) != 1000 || res.StoppedAtBudget {
		t.Fatalf("result of %d bytes, stopped=%v", len(res.Text), res.StoppedAtBudget)
	}
}

// A document of several MiB goes through a filter whole when its budget
// allows it: the default cap is what a delegation carries, not 1 MiB.
func TestExecLargeDocument(t *testing.T) {
	needTools(t, "tr")
	t.Parallel()
	doc := strings.Repeat("a line of a long document\n", 3<<20/26)
	res, err := Exec{Command: []string{"tr", "a-z", "A-Z"}}.Execute(context.Background(), Task{Text: doc, BudgetTokens: 1 << 30}, nil)
	if err != nil {
		t.Fatalf("%d bytes through tr: %v", len(doc), err)
	}
	if res.Text != strings.ToUpper(doc) || res.StoppedAtBudget {
		t.Fatalf("%d bytes through tr: got %d bytes back (stopped at budget: %v)", len(doc), len(res.Text), res.StoppedAtBudget)
	}
}

func TestExecCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Exec{Command: []string{"true"}}.Execute(ctx, Task{}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 8}
	tb.Write([]byte("abc"))
	if got := tb.String(); got != "abc" {
		t.Fatalf("%q", got)
	}
	tb.Write([]byte("defghij"))
	if got := tb.String(); got != "…cdefghij" {
		t.Fatalf("%q", got)
	}
	tb.Write([]byte("0123456789"))
	if got := tb.String(); got != "…23456789" {
		t.Fatalf("%q", got)
	}
}

// TestExecAsks: the multi-turn convention. A command that writes to
// $KITH_QUESTION_FILE pauses the task with that question (its stdout is the
// turn's output); the next turn runs it with KITH_TURN=2 and the
// conversation as JSON on stdin.
func TestExecAsks(t *testing.T) {
	needTools(t, "sh", "cat", "printf")
	t.Parallel()
	x := Exec{Command: []string{"sh", "-c", `if [ "$KITH_TURN" = 1 ]; then printf 'reading '; echo 'which color?' > "$KITH_QUESTION_FILE"; exit 0; fi; cat`}}
	task := Task{Text: "paint", BudgetTokens: 1000}
	res, err := x.Execute(context.Background(), task, nil)
	if err != nil || res.Input == nil || res.Input.Question != "which color?" || res.Text != "reading " {
		t.Fatalf("first turn: %+v (input %+v) %v", res, res.Input, err)
	}
	task.Exchanges = []Exchange{{Question: res.Input.Question, Answer: "blue"}}
	res, err = x.Execute(context.Background(), task, nil)
	if err != nil || res.Input != nil {
		t.Fatalf("second turn: %+v %v", res, err)
	}
	if want := `{"task":"paint","turns":[{"question":"which color?","answer":"blue"}]}`; res.Text != want {
		t.Fatalf("second turn's stdin %q, want %q", res.Text, want)
	}
	// A command that asks nothing leaves no question.
	res, err = Exec{Command: []string{"cat"}}.Execute(context.Background(), Task{Text: "x"}, nil)
	if err != nil || res.Input != nil {
		t.Fatalf("plain command: %+v %v", res, err)
	}
}

// The history file is the command's alone and gone once it is done.
func TestExecHistoryFileRemoved(t *testing.T) {
	e := Exec{Command: []string{"sh", "-c", `printf %s "$KITH_CONTEXT_HISTORY"`}}
	res, err := e.Execute(context.Background(), Task{ContextID: "c", History: []Turn{{Task: "q"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text == "" {
		t.Fatal("no KITH_CONTEXT_HISTORY for a task with history")
	}
	if _, err := os.Stat(res.Text); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("history file %s after the command: %v, want gone", res.Text, err)
	}
}
