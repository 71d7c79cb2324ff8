package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/suite"
)

// suiteCreatedJSON is the answer of POST /api/v1/suites.
type suiteCreatedJSON struct {
	Name          string `json:"name"`
	Version       string `json:"version"`
	Cases         int    `json:"cases"`
	ContentSHA256 string `json:"content_sha256"`
}

func (a *app) suitesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "suites",
		Short: "Upload suites to a running gyre serve (over the API)",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	cmd.AddCommand(a.suitesPushCommand())
	return cmd
}

func (a *app) suitesPushCommand() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "push FILE|DIR",
		Short: "Upload a suite and the fixtures it references (admin)",
		Long: `Read a suite from disk as gyre eval does — a YAML, JSON or JSONL file, or a
suite directory (suite.yaml with cases/ and fixtures/; docs/suites.md) —
check it, upload each fixture it references (PUT /api/v1/fixtures/{name}),
then the suite (POST /api/v1/suites). Its version id is the same as gyre eval
computes on disk. Pushing identical content again changes nothing ("exists");
the same explicit version with other content is refused (409
suite_version_conflict).`,
		Example: `  gyre suites push --server http://127.0.0.1:7070 --key-file admin.key ./refunds
  gyre suites push --server http://127.0.0.1:7070 refunds.yaml --json`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := suite.Load(args[0], suite.Options{})
			if err != nil {
				return usagef("%v", err)
			}
			c, err := a.adminClient(cmd, &f)
			if err != nil {
				return err
			}
			names := make([]string, 0, len(s.Fixtures))
			for n := range s.Fixtures {
				names = append(names, n)
			}
			slices.Sort(names)
			if len(names) > 0 {
				root, err := os.OpenRoot(s.FixturesDir)
				if err != nil {
					return fmt.Errorf("fixtures: %w", err)
				}
				defer root.Close()
				for _, n := range names {
					b, err := root.ReadFile(n)
					if err != nil {
						return fmt.Errorf("fixture %s: %w", n, err)
					}
					if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != s.Fixtures[n] {
						return fmt.Errorf("fixture %s changed while it was being pushed", n)
					}
					status, err := c.CallBody(cmd.Context(), http.MethodPut, "/api/v1/fixtures/"+pathSegment(n), "application/octet-stream", b, nil)
					if err != nil {
						return err
					}
					fmt.Fprintf(a.stderr, "fixture %s: %s (%d bytes)\n", n, createdOrExists(status), len(b))
				}
			}
			// The normalized document without the digests, which the server
			// resolves from the fixtures just pushed: the same content hash.
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(s.Document, &doc); err != nil {
				return fmt.Errorf("suite document: %w", err)
			}
			delete(doc, "fixtures")
			body, err := json.Marshal(doc)
			if err != nil {
				return err
			}
			var raw json.RawMessage
			status, err := c.CallBody(cmd.Context(), http.MethodPost, "/api/v1/suites", "application/json", body, &raw)
			if err != nil {
				return err
			}
			if f.json {
				return writeRawJSON(a.stdout, raw)
			}
			var sc suiteCreatedJSON
			if err := decodeItem(raw, &sc); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SUITE\tVERSION\tCASES\tSTATUS")
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", sc.Name, sc.Version, sc.Cases, createdOrExists(status))
			return tw.Flush()
		},
	}
	f.register(cmd)
	return cmd
}

// createdOrExists names what a content-addressed upload did: 201 created,
// 200 identical content existed.
func createdOrExists(status int) string {
	if status == http.StatusCreated {
		return "created"
	}
	return "exists"
}
