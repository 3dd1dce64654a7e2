package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/api"
)

func delegateCmd() *cobra.Command {
	var req api.DelegateRequest
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "delegate --profile NAME [--peer ID] [--budget N] [--timeout DUR] TEXT",
		Short: "Delegate a task; status goes to stderr, the result to stdout",
		Long: "Delegate a task to a local profile, a named peer, or the best provider found.\n" +
			"Exits 0 only when the delegation completed.",
		Args: cobra.MinimumNArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			req.Text = strings.Join(args, " ")
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
			err = c.Events(ctx, id, func(ev api.Event) {
				line := fmt.Sprintf("[%s] %s", ev.State, ev.Type)
				if ev.Partial != "" {
					line += fmt.Sprintf(" %q", ev.Partial)
				}
				fmt.Fprintln(stderr, line)
			})
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(stderr, "event stream: %v\n", err)
			}
			d, err := c.Delegation(ctx, id)
			if err != nil {
				return err
			}
			if d.Output != "" {
				fmt.Fprintln(cmd.OutOrStdout(), d.Output)
			}
			fmt.Fprintf(stderr, "%s %s", id, d.State)
			if d.Reason != "" {
				fmt.Fprintf(stderr, " (%s)", d.Reason)
			}
			fmt.Fprintf(stderr, " tokens=%d/%d\n", d.Usage.Completion, d.Budget)
			if d.State != "completed" {
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
	_ = cmd.MarkFlagRequired("profile")
	return cmd
}
