package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node"
)

func dashboardCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "dashboard",
		Short: "Print the URL of the running daemon's dashboard",
		Long: `Print the URL of the dashboard that the running daemon serves on its HTTP
listener ([api] listen). Open it in a browser and sign in with the token
that "kith api token" prints.`,
		Args: cobra.NoArgs,
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
			if info.HTTPAddr == "" {
				return errors.New("the daemon's HTTP listener is off: set [api] listen in config.toml (e.g. \"127.0.0.1:7780\") and restart it")
			}
			out := cmd.OutOrStdout()
			fmt.Fprintln(out, node.DashboardURL(info.HTTPAddr))
			fmt.Fprintln(out, "sign in with the token that \"kith api token\" prints")
			return nil
		},
	}
}
