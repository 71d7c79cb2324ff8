package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/atif"
)

func (a *app) atifCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "atif",
		Short: "Work with ATIF trajectory documents",
		Long: `Commands for ATIF (Agent Trajectory Interchange Format) documents, the
trajectories harnesses return and gyre writes from its gateway records.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(a.atifValidateCommand())
	return cmd
}

// atifFileResult is one entry of gyre atif validate --json.
type atifFileResult struct {
	File          string   `json:"file"`
	Valid         bool     `json:"valid"`
	SchemaVersion *string  `json:"schema_version"`
	Errors        []string `json:"errors"`
}

func (a *app) atifValidateCommand() *cobra.Command {
	var asJSON, checkImages bool
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check ATIF trajectory files",
		Long: `Check each ATIF trajectory file against the required subset gyre accepts
(schema_version ATIF-v1.0 to ATIF-v1.7, Harbor's closed objects, version-aware
fields, sequential step ids, tool results that answer a call of their step,
embedded subagent trajectories checked recursively) and print every violation
with its Harbor-style path, e.g.

  trajectory.json: steps.3.observation.results.0.source_call_id: "c9" does not match any tool_call_id of this step

FILE "-" reads standard input. It exits 0 when every file is valid and 1
otherwise. --json prints one array entry per file:
{"file","valid","schema_version","errors":["path: message",…]}, with
schema_version null when the file has none. --check-images also checks, as
Harbor's validator does, that every local image path names a file relative
to the trajectory's directory.`,
		Example: `  gyre atif validate agent/trajectory.json
  gyre atif validate --json runs/*/trajectory.json`,
		Args: argsUsage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, files []string) error {
			results := make([]atifFileResult, 0, len(files))
			invalid := 0
			for _, f := range files {
				r := a.validateATIFFile(f, checkImages)
				if !r.Valid {
					invalid++
				}
				results = append(results, r)
				if !asJSON {
					if err := printATIFResult(a.stdout, r); err != nil {
						return err
					}
				}
			}
			if asJSON {
				if err := writeJSONTo(a.stdout, results); err != nil {
					return err
				}
			}
			if invalid > 0 {
				return fmt.Errorf("%d of %d files are not valid ATIF", invalid, len(files))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	cmd.Flags().BoolVar(&checkImages, "check-images", false, "check that local image files exist next to each trajectory")
	return cmd
}

// validateATIFFile reads and checks one file; a file that cannot be read
// is invalid, with the reason as its one error.
func (a *app) validateATIFFile(name string, checkImages bool) atifFileResult {
	r := atifFileResult{File: name, Errors: []string{}}
	data, err := a.readATIFFile(name)
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return r
	}
	opts := atif.Options{}
	if checkImages && name != "-" {
		opts.ImageDir = filepath.Dir(name)
	}
	v, err := atif.NewValidator(opts)
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return r
	}
	res := v.Check(data)
	r.Valid = res.Valid()
	if res.SchemaVersion != "" {
		r.SchemaVersion = &res.SchemaVersion
	}
	for _, vi := range res.Violations {
		r.Errors = append(r.Errors, vi.String())
	}
	if res.Omitted > 0 {
		r.Errors = append(r.Errors, fmt.Sprintf("… and %d more violations", res.Omitted))
	}
	return r
}

// readATIFFile reads a file ("-" is standard input), refusing one larger
// than the validator would accept.
func (a *app) readATIFFile(name string) ([]byte, error) {
	var rd io.Reader
	if name == "-" {
		rd = a.stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the file name is already on the line
			}
			return nil, fmt.Errorf("cannot read: %w", err)
		}
		defer f.Close()
		rd = f
	}
	data, err := io.ReadAll(io.LimitReader(rd, atif.DefaultMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	if len(data) > atif.DefaultMaxBytes {
		return nil, fmt.Errorf("file is larger than the limit of %d bytes", atif.DefaultMaxBytes)
	}
	return data, nil
}

func printATIFResult(w io.Writer, r atifFileResult) error {
	version := "no schema_version"
	if r.SchemaVersion != nil {
		version = *r.SchemaVersion
	}
	var err error
	if r.Valid {
		_, err = fmt.Fprintf(w, "%s: valid (%s)\n", r.File, version)
		return err
	}
	if _, err = fmt.Fprintf(w, "%s: invalid (%s)\n", r.File, version); err != nil {
		return err
	}
	for _, e := range r.Errors {
		if _, err = fmt.Fprintf(w, "%s: %s\n", r.File, e); err != nil {
			return err
		}
	}
	return nil
}
