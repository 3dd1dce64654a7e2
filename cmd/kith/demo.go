package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/kithmesh/kith/node/demo"
)

func demoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "demo [TEXT]",
		Short: "Run two nodes on loopback and delegate one task between them",
		RunE: func(cmd *cobra.Command, args []string) error {
			text := "hello from alice"
			if len(args) > 0 {
				text = strings.Join(args, " ")
			}
			return demo.Run(cmd.Context(), cmd.OutOrStdout(), text)
		},
	}
}
