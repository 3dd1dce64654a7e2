package main

import (
	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/config"
)

// client connects to the daemon of the selected home.
func client() (*api.Client, string, error) {
	home, err := config.HomeDir(homeFlag)
	if err != nil {
		return nil, "", err
	}
	cfg, err := node.LoadConfig(home)
	if err != nil {
		return nil, "", err
	}
	return api.NewClient(cfg.SocketPath(home)), home, nil
}

// withClient adapts a command body that needs the daemon's API client.
func withClient(fn func(cmd *cobra.Command, args []string, c *api.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, _, err := client()
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(cmd, args, c)
	}
}
