package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Exec runs a command per task: the task's text on stdin, the result on
// stdout, streamed as it arrives.
//
// The command runs in a process group of its own, so that stopping it
// stops everything it started: on cancellation, timeout or a reached limit
// the group gets SIGTERM and, after KillGrace, SIGKILL. When the command
// exits by itself, processes it left behind in its group are killed too; a
// task's work ends with its command, as with systemd's control-group kill
// mode.
//
// Output is kept as valid UTF-8 (invalid bytes become U+FFFD) and cut at
// the token budget (see EstimateTokens) or MaxOutput, whichever is lower.
// The command also finds the task's budget and context in its environment,
// as KITH_BUDGET_TOKENS (when non-zero) and KITH_CONTEXT_ID, so a wrapper
// can pass the budget on to its model; when the task's context has earlier
// turns, KITH_CONTEXT_HISTORY names a JSON file holding them (history.go,
// docs/contexts.md), removed when the command is done.
//
// Multi-turn (protocol 1.3): a command that needs an answer before it can
// go on writes its question to the file named by $KITH_QUESTION_FILE and
// exits 0. Its stdout so far is that turn's output; the task pauses with
// the question (input_required). When the answer comes, the command runs
// again with KITH_TURN set to the turn (2 for the first answer) and, on
// stdin, the JSON object {"task": <the task text>, "turns": [{"question":
// ..., "answer": ...}, ...]} instead of the plain text. The question
// travels in a file of its own because stdout streams out as output while
// it is written, and a question is not output.
type Exec struct {
	// Command is the program and its arguments; no shell is involved.
	Command []string
	// Dir is the working directory; empty means kith's own.
	Dir string
	// Env is added to kith's environment; later entries win.
	Env []string
	// MaxOutput caps stdout in bytes when the budget allows more; zero
	// means DefaultMaxOutput. Exceeding it is a failure, not a budget stop.
	MaxOutput int
	// KillGrace is how long a command has between SIGTERM and SIGKILL;
	// zero means 2s.
	KillGrace time.Duration
}

var _ Executor = Exec{}

// DefaultMaxOutput is Exec's cap on stdout when the budget allows more:
// the most content a delegation's result carries (protocol.MaxPayload),
// so that a command that turns a document into another (a converter, a
// filter) works on documents as large as the mesh carries. A cap of
// 1 MiB failed a 2 MiB document through `tr` whatever its budget.
const DefaultMaxOutput = 64 << 20

const (
	defaultKillGrace = 2 * time.Second
	stderrTailBytes  = 2 << 10
	readChunkBytes   = 32 << 10
	// pipeDrainDelay bounds how long Wait copies stdin and stderr after the
	// command exits. Only a process that escaped the group (setsid) can
	// keep those pipes open; data already written is read well within it.
	pipeDrainDelay = 250 * time.Millisecond
)

type stopReason int

const (
	running stopReason = iota
	stopCancelled
	stopBudget
	stopMaxOutput
)

// Execute runs the command for task. See Exec.
func (e Exec) Execute(ctx context.Context, task Task, emit func(Update)) (Result, error) {
	if len(e.Command) == 0 || e.Command[0] == "" {
		return Result{}, fmt.Errorf("exec: %w: no command configured", ErrFailed)
	}
	name := e.Command[0]
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("exec %s: %w", name, err)
	}
	history, err := writeHistory(task) // contexts: history.go
	if err != nil {
		return Result{}, fmt.Errorf("exec %s: %w", name, err)
	}
	if history != "" {
		defer os.Remove(history)
	}
	// Stdout is a pipe of our own rather than cmd.StdoutPipe, whose reads
	// must all finish before Wait: here the reads race the exit, and the
	// supervisor needs to bound them with a deadline.
	pr, pw, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("exec %s: %w: %v", name, ErrFailed, err)
	}
	stderr := &tailBuffer{max: stderrTailBytes}
	qf, err := os.CreateTemp("", "kith-question-*")
	if err != nil {
		pr.Close()
		pw.Close()
		return Result{}, fmt.Errorf("exec %s: %w: question file: %v", name, ErrFailed, err)
	}
	qf.Close()
	defer os.Remove(qf.Name())
	stdin, err := execInput(task)
	if err != nil {
		pr.Close()
		pw.Close()
		return Result{}, fmt.Errorf("exec %s: %w: %v", name, ErrFailed, err)
	}
	cmd := exec.Command(name, e.Command[1:]...)
	cmd.Dir = e.Dir
	cmd.Env = append(e.environ(task, history), "KITH_QUESTION_FILE="+qf.Name(), "KITH_TURN="+strconv.Itoa(len(task.Exchanges)+1))
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout = pw
	cmd.Stderr = stderr
	cmd.WaitDelay = pipeDrainDelay
	isolate(cmd)
	err = cmd.Start()
	pw.Close() // the child has its copy; ours would hold off EOF forever
	if err != nil {
		pr.Close()
		return Result{}, fmt.Errorf("exec %s: %w: %v", name, ErrFailed, err)
	}
	s := &supervisor{
		cmd:   cmd,
		out:   pr,
		grace: orDefault(e.KillGrace, defaultKillGrace),
		emit:  orNop(emit),
	}
	s.setLimits(task.BudgetTokens, orDefault(e.MaxOutput, DefaultMaxOutput))
	stop, waitErr := s.run(ctx)

	text := s.text.String()
	res := Result{Text: text, Usage: estimatedUsage(task.Text, text), StoppedAtBudget: stop == stopBudget}
	switch stop {
	case stopCancelled:
		return res, fmt.Errorf("exec %s: %w", name, ctx.Err())
	case stopMaxOutput:
		return res, fmt.Errorf("exec %s: %w: output exceeded %d bytes", name, ErrFailed, s.limit)
	case stopBudget:
		return res, nil
	}
	// ErrWaitDelay only says an escaped process held a pipe past the exit.
	if waitErr != nil && !errors.Is(waitErr, exec.ErrWaitDelay) {
		msg := waitErr.Error() // "exit status 3", "signal: killed"
		if tail := stderr.String(); tail != "" {
			msg += "; stderr: " + tail
		}
		return res, fmt.Errorf("exec %s: %w: %s", name, ErrFailed, msg)
	}
	q, err := readQuestion(qf.Name())
	if err != nil {
		return res, fmt.Errorf("exec %s: %w: %v", name, ErrFailed, err)
	}
	if q != "" {
		res.Input = &InputRequest{Question: q}
		res.Usage = estimatedUsage(turnInput(task), text+q)
	}
	return res, nil
}

// execInput is a command's stdin: the task's text on the first turn, the
// JSON of the conversation on later ones.
func execInput(task Task) (string, error) {
	if len(task.Exchanges) == 0 {
		return task.Text, nil
	}
	type turn struct {
		Question string `json:"question"`
		Answer   string `json:"answer"`
	}
	in := struct {
		Task  string `json:"task"`
		Turns []turn `json:"turns"`
	}{Task: task.Text}
	for _, t := range task.Exchanges {
		in.Turns = append(in.Turns, turn{t.Question, t.Answer})
	}
	b, err := json.Marshal(in)
	return string(b), err
}

// readQuestion reads what a command left in its question file, cut to
// MaxQuestion bytes of valid UTF-8; "" when it asks nothing.
func readQuestion(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("question file: %v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxQuestion+utf8.UTFMax))
	if err != nil {
		return "", fmt.Errorf("question file: %v", err)
	}
	q := strings.ToValidUTF8(strings.TrimRight(string(b), "\n"), "\uFFFD")
	return truncateUTF8(q, MaxQuestion), nil
}

func (e Exec) environ(task Task, history string) []string {
	env := append(os.Environ(), e.Env...)
	if task.BudgetTokens > 0 {
		env = append(env, "KITH_BUDGET_TOKENS="+strconv.FormatUint(task.BudgetTokens, 10))
	}
	if history != "" {
		env = append(env, "KITH_CONTEXT_HISTORY="+history)
	}
	return append(env, "KITH_CONTEXT_ID="+task.ContextID)
}

// supervisor watches one running command: it streams stdout, reacts to
// ctx and limits, escalates signals, and returns only once the command has
// been reaped and the stdout reader has finished, so nothing outlives
// Execute.
type supervisor struct {
	cmd   *exec.Cmd
	out   *os.File
	grace time.Duration
	emit  func(Update)

	limit     int        // bytes of text allowed
	overLimit stopReason // what exceeding limit means
	text      strings.Builder
	pending   []byte // an incomplete UTF-8 sequence awaiting the next read
}

func (s *supervisor) setLimits(budget uint64, maxOutput int) {
	s.limit, s.overLimit = maxOutput, stopMaxOutput
	if b := budgetBytes(budget); b <= maxOutput {
		s.limit, s.overLimit = b, stopBudget
	}
}

func (s *supervisor) run(ctx context.Context) (stop stopReason, waitErr error) {
	chunks := make(chan []byte)
	go func() {
		defer close(chunks)
		buf := make([]byte, readChunkBytes)
		for {
			n, err := s.out.Read(buf)
			if n > 0 {
				chunks <- bytes.Clone(buf[:n]) // run drains until close
			}
			if err != nil {
				return // EOF, or the deadline run set to give up
			}
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- s.cmd.Wait() }()
	defer s.out.Close()

	var (
		exited, eof bool
		done        = ctx.Done()
		killTimer   *time.Timer
		kill        <-chan time.Time
	)
	defer func() {
		if killTimer != nil {
			killTimer.Stop()
		}
	}()
	// After the exit nothing is left to signal; only an escaped process
	// can still hold stdout, so reading gets an idle deadline instead.
	drainDeadline := func(d time.Duration) { _ = s.out.SetReadDeadline(time.Now().Add(d)) }
	terminate := func(why stopReason) {
		if stop != running {
			return
		}
		stop = why
		if exited {
			drainDeadline(0)
			return
		}
		_ = signalGroup(s.cmd.Process, false)
		killTimer = time.NewTimer(s.grace)
		kill = killTimer.C
	}
	for !exited || !eof {
		select {
		case p, ok := <-chunks:
			if !ok {
				eof, chunks = true, nil
				if stop == running {
					s.accept(bytes.ToValidUTF8(s.pending, []byte("\uFFFD")), terminate)
				}
				continue
			}
			if stop != running {
				continue // discard, but keep the pipe flowing
			}
			if exited {
				drainDeadline(s.grace)
			}
			s.pending = append(s.pending, p...)
			n := completeLen(s.pending)
			piece := bytes.ToValidUTF8(s.pending[:n], []byte("\uFFFD"))
			s.pending = append(s.pending[:0], s.pending[n:]...)
			s.accept(piece, terminate)
		case waitErr = <-waited:
			exited, waited = true, nil
			_ = signalGroup(s.cmd.Process, true) // whatever it left behind
			if stop == running {
				drainDeadline(s.grace)
			} else {
				drainDeadline(0) // output is no longer wanted
			}
		case <-done:
			done = nil
			terminate(stopCancelled)
		case <-kill:
			kill = nil
			if !exited {
				_ = signalGroup(s.cmd.Process, true)
			}
		}
	}
	return stop, waitErr
}

// accept adds a piece of valid UTF-8 output, emitting what fits the limit
// and stopping the command when the limit cuts it.
func (s *supervisor) accept(piece []byte, terminate func(stopReason)) {
	room := s.limit - s.text.Len()
	full := len(piece) > room
	if full {
		piece = []byte(truncateUTF8(string(piece), room))
	}
	if len(piece) > 0 {
		s.text.Write(piece)
		s.emit(Update{Text: string(piece), Progress: -1})
	}
	if full {
		terminate(s.overLimit)
	}
}

// completeLen returns the length of p without a trailing incomplete UTF-8
// sequence, so a rune split across two reads is emitted whole.
func completeLen(p []byte) int {
	for i := len(p) - 1; i >= 0 && i > len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if utf8.FullRune(p[i:]) {
				return len(p)
			}
			return i
		}
	}
	return len(p)
}

// tailBuffer keeps the last max bytes written to it: the end of stderr is
// where a failing command says why.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		p, t.buf, t.cut = p[len(p)-t.max:], t.buf[:0], true
	} else if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf, t.cut = append(t.buf[:0], t.buf[over:]...), true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the tail on one line, marked when cut.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if t.cut {
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
	}
	s := oneLine(string(b))
	if t.cut {
		s = "…" + s
	}
	return s
}
