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
	cmd.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List delegations",
		Args:  cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			ds, err := c.Delegations(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tROLE\tPROFILE\tSTATE\tPEER\tCREATED\tREASON")
			for _, d := range ds {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.Role, d.Profile, d.State,
					short(d.Peer), d.CreatedAt.Format(time.RFC3339), d.Reason)
			}
			return w.Flush()
		}),
	}, &cobra.Command{
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
		Use:   "verify ID",
		Short: "Re-check the stored result proof of a delegation",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			p, err := c.Verify(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !p.Valid {
				fmt.Fprintf(out, "INVALID: %s\n", p.Error)
				return exitError{1}
			}
			fmt.Fprintf(out, "valid: signed by %s\n  requester  %s\n  state      %s\n  tokens     prompt=%d completion=%d total=%d\n  offer      sha256:%s\n  transcript sha256:%s\n  completed  %s\n",
				p.Provider, p.Requester, p.State, p.Usage.Prompt, p.Usage.Completion, p.Usage.Total,
				p.OfferSHA256, p.Transcript, p.CompletedAt.Format(time.RFC3339Nano))
			return nil
		}),
	})
	return cmd
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
	case n.Role == "provider":
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
