// Package executor runs the work behind a delegation profile.
//
// An Executor takes a Task (the task's text, its JSON data parts, a token
// budget and a context ID), streams partial output through an emit callback
// and returns a Result with token usage. The delegation core maps profile
// names to executors; this package knows nothing of peers, the wire or the
// store, so it imports no other kith package.
//
// Executors:
//
//   - Echo returns the task text, streamed word by word with a Delay, in
//     chunks without one (demos, tests and benchmarks).
//   - Exec runs a command in its own process group: task on stdin, result on
//     stdout. Cancellation kills the whole group, SIGTERM then SIGKILL.
//   - OpenAI streams a chat completion from any OpenAI-compatible endpoint
//     (Ollama, vLLM, llama.cpp) over server-sent events.
//   - A2A forwards the task to an A2A agent by URL (v1.0, or v0.3 when its
//     card says so), streams its artifact chunks, and cancels the remote
//     task when the delegation is cancelled.
//   - HandlerFunc adapts a Go function registered in-process.
//
// Multi-turn tasks: an executor may return a question instead of a result
// (Result.Input; a handler returns AskInput). The task pauses, and the
// executor is called again with the answer in Task.Exchanges. The A2A executor
// maps its agent's input-required state to this and sends the answer to
// the agent's task; Exec reads the question from $KITH_QUESTION_FILE (see
// Exec); Echo and OpenAI never ask.
//
// Every executor keeps the same contract, so the core can treat them alike:
//
//   - emit is called only from the goroutine running Execute, never after
//     Execute returns, and its Update texts are valid UTF-8 (protobuf string
//     fields refuse anything else).
//   - Output never exceeds Task.BudgetTokens of completion: the executor
//     truncates and sets Result.StoppedAtBudget. Where the backend reports
//     its own usage, Result.Usage is that report unaltered; a report above
//     the budget comes back with an error wrapping ErrBudgetExceeded so the
//     core can flag the violation instead of losing it.
//   - Where no usage is reported, tokens are counted with EstimateTokens.
//   - A non-nil error wraps context.Canceled or context.DeadlineExceeded,
//     ErrFailed, or ErrBudgetExceeded. The Result returned beside an error
//     holds whatever output was produced before it.
package executor
