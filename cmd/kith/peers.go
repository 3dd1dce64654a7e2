package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/api"
)

func peersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "peers", Short: "List and manage peers"}
	cmd.AddCommand(&cobra.Command{
		Use:   "add MULTIADDR",
		Short: "Add a static peer (a full multiaddr ending in /p2p/<peer id>)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, args []string, c *api.Client) error {
			p, err := c.AddPeer(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			state := "not connected yet"
			if p.Connected {
				state = "connected"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s added (%s)\n", p.ID, state)
			return nil
		}),
	}, &cobra.Command{
		Use:   "ls",
		Short: "List known peers",
		Args:  cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			peers, err := c.Peers(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PEER\tCONNECTED\tTRUST\tACCESS\tSOURCES\tLAST SEEN\tADDRS")
			for _, p := range peers {
				seen := "-"
				if !p.LastSeen.IsZero() {
					seen = p.LastSeen.Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%v\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Connected, p.Trust, p.Access,
					strings.Join(p.Sources, ","), seen, strings.Join(p.Addrs, " "))
			}
			return w.Flush()
		}),
	})
	return cmd
}
