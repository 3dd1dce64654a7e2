package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func gpuCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "gpu",
		Short: "Show the GPU inventory and the VRAM leases held (exits 0 on a machine without a GPU)",
		Args:  cobra.NoArgs,
		RunE: withFallback(func(cmd *cobra.Command, _ []string, d daemonAPI, offline bool) error {
			g, err := d.GPU(cmd.Context())
			if err != nil {
				return err
			}
			source := "daemon"
			if offline {
				source = "daemon not running; read directly"
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, g)
			}
			if g.NoGPU != "" {
				fmt.Fprintf(out, "no NVIDIA GPU (%s)\n", g.NoGPU)
				fmt.Fprintln(out, "profiles that set vram_mib are refused; set [gpu] declared_vram_mib to declare VRAM by hand")
				return nil
			}
			kind := "NVML"
			if g.Declared {
				kind = "declared in config"
			}
			fmt.Fprintf(out, "%s (%s, %s), headroom %d MiB per device\n\n", g.Inventory, kind, source, g.HeadroomMiB)
			if len(g.Leases) == 0 {
				fmt.Fprintln(out, "no VRAM leases")
				return nil
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "LEASE\tOWNER\tVRAM MiB\tLOCAL\tDEVICE\tGRANTED")
			for _, l := range g.Leases {
				fmt.Fprintf(w, "%s\t%s\t%d\t%v\t%s\t%s\n", l.ID, l.Owner, l.VRAMMiB, l.Local, l.Device, l.GrantedAt.Format(time.RFC3339))
			}
			return w.Flush()
		}),
	}
	jsonFlag(cmd, &asJSON)
	return cmd
}
