package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func idCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "id",
		Short: "Print the peer ID, then one full multiaddr per line",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := client()
			if err != nil {
				return err
			}
			defer c.Close()
			info, err := c.Node(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), info.PeerID)
			for _, a := range info.Addrs {
				fmt.Fprintln(cmd.OutOrStdout(), a)
			}
			return nil
		},
	}
}
