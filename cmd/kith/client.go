package main

import (
	"context"
	"errors"

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

// daemonAPI is what the commands that work without a daemon ask of it:
// *api.Client answers from the running daemon, *node.Offline from the
// home's key and store.
type daemonAPI interface {
	Node(ctx context.Context) (api.NodeInfo, error)
	ChangePeer(ctx context.Context, id string, ch api.PeerChange) error
	Audit(ctx context.Context) ([]api.AuditEntry, error)
	GPU(ctx context.Context) (api.GPU, error)
}

var (
	_ daemonAPI = (*api.Client)(nil)
	_ daemonAPI = (*node.Offline)(nil)
)

// withFallback runs fn against the daemon and, when none is running,
// again against the home directly (offline true). fn must call d before it
// prints anything.
func withFallback(fn func(cmd *cobra.Command, args []string, d daemonAPI, offline bool) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, home, err := client()
		if err != nil {
			return err
		}
		defer c.Close()
		if err := fn(cmd, args, c, false); !errors.Is(err, api.ErrDaemonNotRunning) {
			return err
		}
		o, err := node.NewOffline(home)
		if err != nil {
			return err
		}
		return fn(cmd, args, o, true)
	}
}
