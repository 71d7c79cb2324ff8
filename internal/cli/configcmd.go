package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (a *app) configCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "config [serve flags]",
		Short: "Print the configuration gyre serve would run with",
		Long: `Resolve the configuration exactly as gyre serve does (flags, then GYRE_<FLAG>
environment variables, then the --config file, then defaults), check it, and
print each setting with where its value came from. It exits 2 when the
configuration is invalid. Passwords in --db are shown redacted.`,
		Example: `  GYRE_ADDR=:8080 gyre config --public-url https://gyre.example.com`,
		Args:    argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, from, err := a.config(cmd, true)
			if err != nil {
				return err
			}
			if asJSON {
				out := make(map[string]source, len(from))
				for _, s := range settings {
					out[s.key()] = from[s.flag]
				}
				return writeJSONTo(a.stdout, out)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SETTING\tVALUE\tSOURCE")
			for _, s := range settings {
				v := from[s.flag]
				val := v.Value
				if val == "" {
					val = `""`
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.flag, val, v.Source)
			}
			return tw.Flush()
		},
	}
	bindFlags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the settings as JSON")
	return cmd
}
