package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildInfo is what gyre version reports.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	CommitAt  string `json:"commit_time"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// readBuildInfo reads the module version and VCS stamp the Go toolchain
// embedded in the binary. A binary built from a source tree without VCS
// stamping reports version "(devel)" and an empty commit.
func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(devel)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := bi.Main.Version; v != "" {
		b.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.CommitAt = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

func versionString() string {
	b := readBuildInfo()
	s := "gyre " + b.Version
	if b.Commit != "" {
		c := b.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if b.Modified {
			c += "+dirty"
		}
		s += " (commit " + c + ")"
	}
	return s + " " + b.GoVersion + " " + b.Platform
}

func (a *app) versionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print gyre's version",
		Long: `Print the module version and, when the binary was built from a VCS checkout,
the commit it was built from, plus the Go version and platform.`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			if asJSON {
				return writeJSONTo(a.stdout, readBuildInfo())
			}
			_, err := fmt.Fprintln(a.stdout, versionString())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the version as JSON")
	return cmd
}
