package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/api"
)

func tasksCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tasks", Short: "Inspect and control delegations"}
	cmd.AddCommand(tasksLsCmd(), &cobra.Command{
		Use:   "show ID",
		Short: "Show one delegation as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			d, err := c.Delegation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), d)
		}),
	}, &cobra.Command{
		Use:   "tree",
		Short: "Show delegations as trees of parents and children (remote ones marked ⇄ with their provider)",
		Args:  cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			roots, err := c.Tree(cmd.Context())
			if err != nil {
				return err
			}
			for _, r := range roots {
				printTree(cmd.OutOrStdout(), r, "", "")
			}
			return nil
		}),
	}, &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a delegation",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			if err := c.Cancel(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s cancelled\n", args[0])
			return nil
		}),
	}, &cobra.Command{
		Use:   "reply ID TEXT",
		Short: "Answer the question of a delegation waiting for input",
		Long: "Answer the question of a delegation in state input_required (\"kith tasks show ID\"\n" +
			"shows it): the answer continues the same delegation on the same provider,\n" +
			"within its deadline and budget. TEXT may be several words.",
		Args: cobra.MinimumNArgs(2),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			d, err := c.Reply(cmd.Context(), args[0], strings.Join(args[1:], " "))
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s answered: %s\n", d.ID, d.State)
			return nil
		}),
	}, &cobra.Command{
		Use:   "verify ID",
		Short: "Re-check the stored result proof of a delegation",
		Args:  cobra.ExactArgs(1),
		Long: "Re-check the result proof the provider signed, on the node that requested the\n" +
			"delegation: it holds the signed result. A provider keeps no proof to check.",
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			d, err := c.Delegation(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if d.Role == api.RoleProvider {
				return fmt.Errorf("this node served %s as its provider: it signed the result proof it sent, and proofs are verified by the requester (run \"kith tasks verify %s\" on %s)", d.ID, d.ID, d.Peer)
			}
			p, err := c.Verify(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !p.Valid {
				fmt.Fprintf(out, "INVALID: %s\n", p.Error)
				return exitError{1}
			}
			if p.Digest == "" { // a daemon from before protocol 1.6 names no digest
				p.Digest, p.OfferDigest, p.TranscriptDigest = "sha256", p.OfferSHA256, p.Transcript
			}
			fmt.Fprintf(out, "valid: signed by %s\n  requester  %s\n  state      %s\n  tokens     prompt=%d completion=%d total=%d\n  offer      %s:%s\n  transcript %s:%s\n  completed  %s\n",
				p.Provider, p.Requester, p.State, p.Usage.Prompt, p.Usage.Completion, p.Usage.Total,
				p.Digest, p.OfferDigest, p.Digest, p.TranscriptDigest, p.CompletedAt.Format(time.RFC3339Nano))
			if p.Turns > 1 {
				fmt.Fprintf(out, "  turns      %d (the transcript covers every answer)\n", p.Turns)
			}
			return nil
		}),
	})
	return cmd
}

func tasksLsCmd() *cobra.Command {
	var q api.ListQuery
	var since, states string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List delegations, oldest first; the newest --limit of them",
		Long: "List delegations, oldest first: the newest --limit (default 1000) that match\n" +
			"--since and --state. When older matches were left out, a line on stderr says so.",
		Args: cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				q.Since = t
			}
			if states != "" {
				for _, s := range strings.Split(states, ",") {
					st, err := api.ParseState(s)
					if err != nil {
						return err
					}
					q.States = append(q.States, st)
				}
			}
			ds, truncated, err := c.ListDelegations(cmd.Context(), q)
			if err != nil {
				return err
			}
			if truncated {
				limit := q.Limit
				if limit == 0 {
					limit = api.DefaultListLimit
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "truncated: the newest %d shown; older ones match too (raise --limit or narrow with --since, --state)\n", limit)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), ds)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tROLE\tPROFILE\tSTATE\tPEER\tCREATED\tREASON")
			for _, d := range ds {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.Role, d.Profile, d.State,
					short(d.Peer), d.CreatedAt.Format(time.RFC3339), d.Reason)
			}
			return w.Flush()
		}),
	}
	cmd.Flags().IntVar(&q.Limit, "limit", 0, fmt.Sprintf("show at most the newest N (default %d, at most %d)", api.DefaultListLimit, api.MaxListLimit))
	cmd.Flags().StringVar(&since, "since", "", "only those created since a time (RFC 3339) or a duration ago (1h30m)")
	cmd.Flags().StringVar(&states, "state", "", "only these states, comma-separated (completed,failed,...)")
	jsonFlag(cmd, &asJSON)
	return cmd
}

// parseSince reads --since: an RFC 3339 time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration like 1h30m or an RFC 3339 time like 2026-01-02T15:04:05Z", s)
}

func short(id string) string {
	if len(id) > 16 {
		return id[:6] + "…" + id[len(id)-6:]
	}
	return id
}

func printTree(w io.Writer, n api.TreeNode, prefix, childPrefix string) {
	where := "local"
	switch {
	case n.Role == api.RoleProvider:
		where = "served for " + short(n.Peer)
	case n.Remote:
		where = "⇄ " + short(n.Peer)
	}
	line := fmt.Sprintf("%s%s %s %s [%s]", prefix, n.ID, n.Profile, n.State, where)
	fmt.Fprintln(w, strings.TrimRight(line, " "))
	for i, c := range n.Children {
		if i == len(n.Children)-1 {
			printTree(w, c, childPrefix+"└─ ", childPrefix+"   ")
		} else {
			printTree(w, c, childPrefix+"├─ ", childPrefix+"│  ")
		}
	}
}
