package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/api"
)

// maxPlanFile bounds a plan file read from disk (the daemon's own cap).
const maxPlanFile = 1 << 20

func planCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Run WorkPlans: subtasks in a DAG across the mesh, and their decisions ledger",
		Long: "A plan file (TOML or JSON, see docs/plans.md) declares subtasks with dependency\n" +
			"edges, a token budget, a retry policy and an assemble step. This node coordinates\n" +
			"it: the ready subtasks go out in parallel as child delegations of the plan.",
	}
	cmd.AddCommand(planRunCmd(), planShowCmd(), planLsCmd(), planCancelCmd(), planDecisionsCmd())
	return cmd
}

// stdinIsTerminal: someone is there to answer a question.
func stdinIsTerminal() bool {
	st, err := os.Stdin.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func planRunCmd() *cobra.Command {
	var yes, wait, asJSON bool
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Check a plan file, show it, ask for confirmation, and start it",
		Long: "Checks that the plan is a DAG whose profiles some node offers, with references\n" +
			"only to outputs of dependencies and budgets within the plan's; shows it as it\n" +
			"would run; and starts it once confirmed. Without a terminal to ask on, it\n" +
			"starts nothing unless --yes is given.",
		Args: cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			text, err := readPlanFile(args[0])
			if err != nil {
				return err
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			checked, err := c.CheckPlan(ctx, filepath.Base(args[0]), text)
			if err != nil {
				return err
			}
			if !asJSON {
				drawPlan(out, checked)
			}
			if !yes {
				if !stdinIsTerminal() {
					return errors.New("not starting the plan: no terminal to confirm on (pass --yes to start it without asking)")
				}
				fmt.Fprint(out, "Start this plan? [y/N] ")
				line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
					fmt.Fprintln(out, "not started")
					return exitError{1}
				}
			}
			p, err := c.RunPlan(ctx, filepath.Base(args[0]), text)
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintf(out, "plan %s started\n", p.ID)
			}
			if wait {
				for p.State == "running" {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(250 * time.Millisecond):
					}
					if p, err = c.Plan(ctx, p.ID); err != nil {
						return err
					}
				}
				if !asJSON {
					drawPlan(out, p)
				}
			}
			if asJSON {
				return printJSON(out, p)
			}
			if wait && p.State != "completed" {
				return exitError{1}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "start without asking for confirmation")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the plan ends and show it (exit 1 unless it completed)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the started plan as JSON")
	return cmd
}

func readPlanFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPlanFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxPlanFile {
		return "", fmt.Errorf("%s: larger than %d bytes", path, maxPlanFile)
	}
	return string(b), nil
}

func planShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Draw a plan's DAG: each step's state and where each attempt ran",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			p, err := c.Plan(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), p)
			}
			drawPlan(cmd.OutOrStdout(), p)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func planLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the plans this node coordinates, newest first",
		Args:  cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			ps, err := c.Plans(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ps)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSTATE\tBUDGET\tCREATED")
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", p.ID, p.Name, p.State, p.Budget, p.CreatedAt.Local().Format(time.DateTime))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func planCancelCmd() *cobra.Command {
	var why string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a running plan (its delegations in flight are cancelled)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			if err := c.CancelPlan(cmd.Context(), args[0], why); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "plan %s cancelled\n", args[0])
			return nil
		}),
	}
	cmd.Flags().StringVar(&why, "why", "", "the reason, kept with the plan")
	return cmd
}

func planDecisionsCmd() *cobra.Command {
	var why string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "decisions ID [merge SLUG|ENTRY | reject ENTRY --why TEXT]",
		Short: "List a plan's decisions ledger, or merge or reject a pending proposal",
		Long: "Subtasks propose entries in their results; they wait here as pending until the\n" +
			"plan's owner merges them (a decision that every later subtask receives before its\n" +
			"task) or rejects them (with a reason, kept). Nothing is ever rewritten.",
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 1:
				return nil
			case len(args) == 3 && (args[1] == "merge" || args[1] == "reject"):
				return nil
			}
			return errors.New("want ID, or ID merge SLUG|ENTRY, or ID reject SLUG|ENTRY --why TEXT")
		},
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			if len(args) == 3 {
				a := api.LedgerAction{Ref: args[2], Why: why, Origin: "cli"}
				var e api.LedgerEntry
				var err error
				if args[1] == "merge" {
					e, err = c.MergeDecision(ctx, args[0], a)
				} else {
					if strings.TrimSpace(why) == "" {
						return errors.New("a rejection needs a reason: --why TEXT")
					}
					e, err = c.RejectDecision(ctx, args[0], a)
				}
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(out, e)
				}
				fmt.Fprintf(out, "entry %d: %s of proposal %d (%s)\n", e.Seq, e.Kind, e.Ref, e.Slug)
				return nil
			}
			l, err := c.Decisions(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(out, l)
			}
			printLedger(out, l)
			return nil
		}),
	}
	cmd.Flags().StringVar(&why, "why", "", "why a proposal is rejected (required to reject)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func printLedger(w io.Writer, l []api.LedgerEntry) {
	if len(l) == 0 {
		fmt.Fprintln(w, "the ledger is empty")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tKIND\tSLUG\tTYPE\tSTATUS\tFROM\tBODY / REASON")
	for _, e := range l {
		status, from, body := e.Status, e.Subtask, oneLine(e.Body)
		switch e.Kind {
		case "decision":
			status = fmt.Sprintf("merges #%d", e.Ref)
			from = e.Origin
		case "rejection":
			status = fmt.Sprintf("rejects #%d", e.Ref)
			from, body = e.Origin, oneLine(e.Why)
		case "proposal":
			if e.SettledBy != 0 {
				status = fmt.Sprintf("%s (#%d)", e.Status, e.SettledBy)
			}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Kind, e.Slug, e.Type, status, from, body)
	}
	_ = tw.Flush()
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// shortPeer keeps a peer ID recognisable in a line: its first and last
// characters.
func shortPeer(p string) string {
	if len(p) <= 16 {
		return p
	}
	return p[:8] + "…" + p[len(p)-6:]
}

var stepMarks = map[string]string{
	"done": "✓", "running": "▶", "dispatching": "▶", "pending": "·", "failed": "✗", "skipped": "–", "cancelled": "–",
}

// drawPlan draws the DAG by level: a step's level is one more than that of
// the deepest step it runs after, so every edge points up the page; each
// step names what it waits for, its state and where its attempts ran.
func drawPlan(w io.Writer, p api.Plan) {
	id := p.ID
	if id == "" {
		id = "(not started)"
	}
	fmt.Fprintf(w, "plan %s", id)
	if p.Name != "" {
		fmt.Fprintf(w, " %q", p.Name)
	}
	fmt.Fprintf(w, "  %s  tokens %d of %d", p.State, p.Used, p.Budget)
	if p.Attempts > 0 {
		fmt.Fprintf(w, "  up to %d attempts a step", p.Attempts)
	}
	fmt.Fprintln(w)
	if p.Reason != "" {
		fmt.Fprintf(w, "  reason: %s\n", p.Reason)
	}
	level := map[string]int{}
	for _, s := range p.Steps { // dependency order: what s waits for is already placed
		for _, a := range s.After {
			level[s.ID] = max(level[s.ID], level[a]+1)
		}
	}
	type row struct{ name, after, rest string }
	var rows []row
	for _, s := range p.Steps {
		mark := stepMarks[s.State]
		if mark == "" {
			mark = "?"
		}
		indent := strings.Repeat("  ", level[s.ID])
		after := ""
		if len(s.After) > 0 {
			after = "← " + strings.Join(s.After, ", ")
			if s.ID == "assemble" {
				after = "← every fragment"
			}
		}
		where := ""
		switch {
		case len(s.Attempts) > 0:
			a := s.Attempts[len(s.Attempts)-1]
			switch {
			case a.Local:
				where = "on this node"
			case a.Peer != "":
				where = "on " + shortPeer(a.Peer)
			}
		case s.Peer != "":
			where = "pinned to " + shortPeer(s.Peer)
		case s.MinTrust != "":
			where = "min trust " + s.MinTrust
		}
		rows = append(rows, row{indent + mark + " " + s.ID, after,
			fmt.Sprintf("%-11s %-12s %9s  %s", s.State, s.Profile, fmt.Sprintf("%d/%d", s.Used, s.Budget), where)})
		for i, a := range s.Attempts[:max(0, len(s.Attempts)-1)] {
			on := shortPeer(a.Peer)
			if a.Local {
				on = "this node"
			}
			rows = append(rows, row{indent + "    attempt " + strconv.Itoa(i+1), "", fmt.Sprintf("%s on %s: %s", a.State, on, oneLine(a.Reason))})
		}
	}
	nameW, afterW := 0, 0
	for _, r := range rows {
		nameW = max(nameW, utf8.RuneCountInString(r.name))
		afterW = max(afterW, utf8.RuneCountInString(r.after))
	}
	pad := func(s string, n int) string { return s + strings.Repeat(" ", n-utf8.RuneCountInString(s)) }
	fmt.Fprintf(w, "  %s  %s  %-11s %-12s %9s  %s\n", pad("STEP", nameW), pad("AFTER", afterW), "STATE", "PROFILE", "TOKENS", "WHERE")
	for _, r := range rows {
		fmt.Fprintf(w, "  %s  %s  %s\n", pad(r.name, nameW), pad(r.after, afterW), strings.TrimRight(r.rest, " "))
	}
	if p.Output != "" {
		fmt.Fprintf(w, "output:\n%s\n", p.Output)
	}
}
