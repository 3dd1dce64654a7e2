package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/crypto"
	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/node/config"
)

func initCmd() *cobra.Command {
	var listen []string
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the node's identity and a commented default config",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			home, err := config.HomeDir(homeFlag)
			if err != nil {
				return err
			}
			id, err := node.Init(home, listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", id)
			fmt.Fprintf(cmd.ErrOrStderr(), "initialized kith node in %s\n", home)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&listen, "listen", nil, "listen multiaddr (repeatable; default TCP and QUIC on port 4001, all interfaces)")
	return cmd
}

func daemonCmd() *cobra.Command {
	var listen []string
	var check bool
	var logLevel, logFormat string
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the node in the foreground (initializing the home first if it is new)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			home, err := config.HomeDir(homeFlag)
			if err != nil {
				return err
			}
			if !check && !crypto.IdentityExists(filepath.Join(home, node.IdentityFile)) {
				// A fresh machine needs one command to run a node.
				initListen := listen
				if _, err := os.Stat(node.ConfigPath(home)); err == nil {
					initListen = nil // the config stays; --listen overrides it below
				}
				id, err := node.Init(home, initListen)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "initialized kith node %s in %s\n", id, home)
			}
			cfg, err := node.LoadConfig(home)
			if err != nil {
				return err
			}
			if len(listen) > 0 {
				cfg.Listen = listen
			}
			// Flags over the file; Validate checks them with it.
			if logLevel != "" {
				cfg.LogLevel = logLevel
			}
			if logFormat != "" {
				cfg.LogFormat = logFormat
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			if check {
				fmt.Fprintln(cmd.OutOrStdout(), "config ok")
				return nil
			}
			logger := newLogger(cfg.LogFormat, cfg.SlogLevel())
			storeLogger := newLogger(cfg.LogFormat, config.ParseLogLevel(cfg.Store.DBLogLevel))
			logger.Info("kith starting", "version", node.Version)
			n, err := node.New(home, cfg, node.Options{Logger: logger, StoreLogger: storeLogger})
			if err != nil {
				return err
			}
			return n.Run(cmd.Context())
		},
	}
	cmd.Flags().StringArrayVar(&listen, "listen", nil, "listen multiaddr, replacing the config's (repeatable)")
	cmd.Flags().BoolVar(&check, "check", false, "validate the config and exit")
	cmd.Flags().StringVar(&logLevel, "log-level", "", "lowest level logged: debug, info, warn or error (default: the config's log_level)")
	cmd.Flags().StringVar(&logFormat, "log-format", "", "log format: text or json (default: the config's log_format)")
	return cmd
}

// newLogger writes records at level and above to stderr in format.
func newLogger(format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == config.LogFormatJSON {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
