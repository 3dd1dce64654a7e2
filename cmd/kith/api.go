package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node"
	"github.com/kithmesh/kith/node/api"
	"github.com/kithmesh/kith/node/gateway"
)

func apiCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "api", Short: "The HTTP listener ([api] in config.toml): its bearer token"}
	var rotate bool
	token := &cobra.Command{
		Use:   "token",
		Short: "Print the HTTP listener's bearer token (--rotate: replace it first)",
		Long: `Print the bearer token that the HTTP listener ([api] listen) wants in
"Authorization: Bearer <token>". It lives in <home>/api.token (mode 0600).
--rotate writes a new one; a running daemon switches to it at once and the
old one stops working.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, home, err := client()
			if err != nil {
				return err
			}
			defer c.Close()
			t, err := c.Token(cmd.Context(), rotate)
			if errors.Is(err, api.ErrDaemonNotRunning) {
				t.Token, err = tokenOffline(home, rotate)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), t.Token)
			return nil
		},
	}
	token.Flags().BoolVar(&rotate, "rotate", false, "replace the token with a new one")
	cmd.AddCommand(token)
	return cmd
}

func tokenOffline(home string, rotate bool) (string, error) {
	if rotate {
		return node.RotateToken(home)
	}
	return node.EnsureToken(home)
}

func cardCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "card", Short: "A2A agent cards"}
	cmd.AddCommand(&cobra.Command{
		Use:   "verify URL",
		Short: "Fetch an A2A agent card and verify its kith signature",
		Long: `Fetch an agent card (a card's URL, or an agent's base URL) and check its
JWS signature: EdDSA over the JCS-canonical card by the Ed25519 key that the
signature's kid, a peer ID, names. Exit 0 and print the signing peer only
when it verifies.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			card, err := gateway.FetchCard(ctx, &http.Client{}, args[0])
			if err != nil {
				return err
			}
			signer, err := gateway.VerifyKithCard(card)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "valid: %q signed by %s\n", card.Name, signer)
			return nil
		},
	})
	return cmd
}
