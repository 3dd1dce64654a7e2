package main

import "github.com/spf13/cobra"

func discoverCmd() *cobra.Command {
	return &cobra.Command{Use: "discover", Short: "List known peers and where they were found", Hidden: true}
}
