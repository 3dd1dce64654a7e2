package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/node/api"
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
	var logLevel config.LogLevel
	var logFormat config.LogFormat
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the node in the foreground (initializing the home first if it is new)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			home, err := config.HomeDir(homeFlag)
			if err != nil {
				return err
			}
			if !check && !node.IdentityExists(home) {
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
			// Flags over the file, at start and on every reload; Validate
			// checks them with it.
			override := func(cfg *config.Config) {
				if len(listen) > 0 {
					cfg.Listen = listen
				}
				if cmd.Flags().Changed("log-level") {
					cfg.LogLevel = logLevel
				}
				if cmd.Flags().Changed("log-format") {
					cfg.LogFormat = logFormat
				}
			}
			override(&cfg)
			if err := cfg.Validate(); err != nil {
				return err
			}
			if check {
				fmt.Fprintln(cmd.OutOrStdout(), "config ok")
				return nil
			}
			level := new(slog.LevelVar)
			level.Set(cfg.LogLevel.Slog())
			logger := newLogger(cfg.LogFormat, level)
			storeLogger := newLogger(cfg.LogFormat, cfg.Store.DBLogLevel.Slog())
			logger.Info("kith starting", "version", node.Version)
			n, err := node.New(home, cfg, node.Options{Logger: logger, StoreLogger: storeLogger, LogLevel: level, Override: override})
			if err != nil {
				return err
			}
			// SIGHUP re-reads the config, as "kith reload" does.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go func() {
				select {
				case <-n.Ready():
				case <-cmd.Context().Done():
					return
				}
				for {
					select {
					case <-hup:
						if _, err := n.Reload(); err != nil {
							logger.Error("config reload failed; the running config stays", "err", err)
						}
					case <-cmd.Context().Done():
						return
					}
				}
			}()
			return n.Run(cmd.Context())
		},
	}
	cmd.Flags().StringArrayVar(&listen, "listen", nil, "listen multiaddr, replacing the config's (repeatable)")
	cmd.Flags().BoolVar(&check, "check", false, "validate the config and exit")
	// Typed flags: a misspelt value fails here, with the allowed values.
	cmd.Flags().TextVar(&logLevel, "log-level", config.LogInfo, "lowest level logged: debug, info, warn or error (default: the config's log_level)")
	cmd.Flags().TextVar(&logFormat, "log-format", config.LogFormatText, "log format: text or json (default: the config's log_format)")
	for _, name := range []string{"log-level", "log-format"} {
		cmd.Flags().Lookup(name).DefValue = "" // the config's, not the flag's, is the default
	}
	return cmd
}

// newLogger writes records at level and above to stderr in format.
func newLogger(format config.LogFormat, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == config.LogFormatJSON {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func reloadCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reload",
		Short: "Have the daemon re-read its config: profiles, policy.mode, peers and log_level change live",
		Long: "Have the running daemon re-read config.toml (as SIGHUP does). profiles, policy.mode,\n" +
			"new peers and log_level take effect at once; every other changed key is listed as\n" +
			"needing a restart. An invalid file changes nothing.",
		Args: cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, _ []string, c *api.Client) error {
			r, err := c.Reload(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(r.Applied) == 0 && len(r.NeedRestart) == 0 {
				fmt.Fprintln(out, "config unchanged")
				return nil
			}
			if len(r.Applied) > 0 {
				fmt.Fprintf(out, "applied: %s\n", strings.Join(r.Applied, ", "))
			}
			if len(r.NeedRestart) > 0 {
				fmt.Fprintf(out, "need a restart: %s\n", strings.Join(r.NeedRestart, ", "))
			}
			return nil
		}),
	}
}
