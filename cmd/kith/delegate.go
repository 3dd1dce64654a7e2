package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/api"
)

func delegateCmd() *cobra.Command {
	var req api.DelegateRequest
	var timeout time.Duration
	var file, output string
	cmd := &cobra.Command{
		Use:   "delegate --profile NAME [--peer ID] [--budget N] [--timeout DUR] [--output FILE] [TEXT... | - | --file PATH]",
		Short: "Delegate a task; status goes to stderr, the result to stdout",
		Long: "Delegate a task to a local profile, a named peer, or the best provider found.\n" +
			"The task is TEXT, or read from --file PATH, or from stdin with \"-\" or when\n" +
			"stdin is a pipe and no TEXT is given; at most 64 MiB of UTF-8 text.\n" +
			"Exits 0 only when the delegation completed, and 2 when it waits for input:\n" +
			"the question is printed, and \"kith tasks reply ID TEXT\" answers it.",
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			text, err := taskText(cmd, args, file)
			if err != nil {
				return err
			}
			req.Text = text
			if timeout > 0 {
				req.Timeout = timeout.String()
			}
			ctx := cmd.Context()
			id, err := c.Delegate(ctx, req)
			if err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			fmt.Fprintf(stderr, "delegation %s\n", id)
			// A question ends the wait: the answer may take a person
			// minutes, and comes from "kith tasks reply".
			evCtx, stopEvents := context.WithCancel(ctx)
			defer stopEvents()
			err = c.Events(evCtx, id, func(ev api.Event) {
				if ev.State == api.StateInputRequired {
					stopEvents()
				}
				fmt.Fprintln(stderr, eventLine(ev))
			})
			if err != nil && evCtx.Err() == nil {
				fmt.Fprintf(stderr, "event stream: %v\n", err)
			}
			d, err := c.Delegation(ctx, id)
			if err != nil {
				return err
			}
			switch {
			case output != "" && d.State == api.StateCompleted:
				// The file holds exactly the result; nothing is written for
				// a delegation that did not complete.
				if err := os.WriteFile(output, []byte(d.Output), 0o644); err != nil {
					return fmt.Errorf("--output: %w", err)
				}
			case output == "" && d.Output != "":
				fmt.Fprintln(cmd.OutOrStdout(), d.Output)
			}
			fmt.Fprintf(stderr, "%s %s", id, d.State)
			if d.Reason != "" {
				fmt.Fprintf(stderr, " (%s)", d.Reason)
			}
			fmt.Fprintf(stderr, " tokens=%d/%d\n", d.Usage.Completion, d.Budget)
			if d.State == api.StateInputRequired {
				fmt.Fprintf(stderr, "question (turn %d): %s\nanswer with: kith tasks reply %s TEXT\n", d.Turn, d.Question, id)
				return exitError{2}
			}
			if d.State != api.StateCompleted {
				return exitError{1}
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&req.Profile, "profile", "", "profile to run (required)")
	cmd.Flags().StringVar(&req.Peer, "peer", "", "peer ID of the provider (default: a local profile, else the best known provider)")
	cmd.Flags().Uint64Var(&req.Budget, "budget", 0, "token budget (default: the provider's maximum for the profile)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (default: the node's default_timeout)")
	cmd.Flags().StringVar(&req.ContextID, "context", "", "conversation context ID")
	cmd.Flags().StringVar(&req.Parent, "parent", "", "parent delegation ID")
	cmd.Flags().StringVarP(&file, "file", "f", "", "read the task from this file (\"-\": stdin)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the result to this file instead of stdout")
	_ = cmd.MarkFlagRequired("profile")
	return cmd
}

// errNoTask: neither TEXT, --file nor a piped stdin.
var errNoTask = errors.New("no task: give TEXT, --file PATH, or pipe it on stdin (\"-\")")

// taskText picks the task's source: --file, "-" (stdin), TEXT, or stdin
// when it is not a terminal and nothing else was given.
func taskText(cmd *cobra.Command, args []string, file string) (string, error) {
	var src io.Reader
	name := file
	switch {
	case file != "" && len(args) > 0:
		return "", errors.New("give the task as TEXT or --file, not both")
	case file == "-" || len(args) == 1 && args[0] == "-":
		src, name = cmd.InOrStdin(), "stdin"
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--file: %w", err)
		}
		defer f.Close()
		src = f
	case len(args) > 0:
		return strings.Join(args, " "), nil
	case stdinIsPipe(cmd):
		src, name = cmd.InOrStdin(), "stdin"
	default:
		return "", errNoTask
	}
	// Read one byte past the cap to tell "exactly 64 MiB" from "more".
	b, err := io.ReadAll(io.LimitReader(src, api.MaxTaskBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading the task from %s: %w", name, err)
	}
	if len(b) > api.MaxTaskBytes {
		return "", fmt.Errorf("task from %s: more than %d MiB; a delegation carries at most %d bytes", name, api.MaxTaskBytes>>20, api.MaxTaskBytes)
	}
	if len(b) == 0 {
		return "", fmt.Errorf("task from %s: empty", name)
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("task from %s: not UTF-8 text", name)
	}
	return string(b), nil
}

// stdinIsPipe: stdin is a pipe or a file, not a terminal or /dev/null.
func stdinIsPipe(cmd *cobra.Command) bool {
	f, ok := cmd.InOrStdin().(*os.File)
	if !ok {
		return true
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice == 0
}

// eventLine is how delegate shows one event of the delegation it follows:
// its state and type, the progress the provider reported, if any, and the
// output it streamed.
func eventLine(ev api.Event) string {
	line := fmt.Sprintf("[%s] %s", ev.State, ev.Type)
	if ev.Progress > 0 {
		line += fmt.Sprintf(" %d%%", ev.Progress/10)
	}
	if ev.Partial != "" {
		line += " " + partialLine(ev.Partial)
	}
	return line
}

// partialLine shows streamed output on a status line: quoted, and cut
// (with its size) when it is long, so a large output does not flood the
// terminal; the whole of it is the result on stdout.
func partialLine(s string) string {
	const show = 100
	if len(s) <= show+20 {
		return fmt.Sprintf("%q", s)
	}
	cut := show
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}
