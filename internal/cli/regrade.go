package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/store"
)

// regradeJSON is the --json form of gyre eval regrade: the summary of
// gyre eval run --json, with how many runs were graded again and why the
// others were not.
type regradeJSON struct {
	eval.Summary
	Regraded int            `json:"regraded"`
	Skipped  map[string]int `json:"skipped"`
}

func (a *app) evalRegradeCommand() *cobra.Command {
	var (
		asJSON                           bool
		graders, server, key, tenant, bl string
	)
	cmd := &cobra.Command{
		Use:   "regrade ID [--graders FILE]",
		Short: "Grade an experiment's stored runs again, without re-running them",
		Long: `Grade the stored runs of experiment ID again (SPEC §8): each run's answer,
output, artifacts and trajectory as they were recorded — the harness is never
called. Runs are graded with the graders their case had when they ran (kept on
each run record), or with the list of grader declarations in --graders FILE
(YAML or JSON), which changes no suite. Runs that were never graded (errors,
timeouts) stay as they are. Every earlier verdict set is kept; the latest is
current, and the experiment's summary (pass rate, cases, exit code) is
recomputed from it and printed. Judge graders use the policies of the place
the regrade runs.

With --server and --key (admin or evaluator) the server regrades through
POST /api/v1/experiments/{id}/regrade with its own judge and command
allow-list; otherwise the embedded store (--data, --db) is regraded here.`,
		Example: `  gyre eval regrade 0190b7a0-1c2d-7e3f-8a4b-5c6d7e8f9a0b
  gyre eval regrade 0190b7a0-1c2d-7e3f-8a4b-5c6d7e8f9a0b --graders stricter.yaml --json
  gyre eval regrade 0190b7a0-1c2d-7e3f-8a4b-5c6d7e8f9a0b --server https://gyre.example.com --key $GYRE_KEY`,
		Args: argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if _, err := uuid.Parse(id); err != nil {
				return usagef("%q is not an experiment id", id)
			}
			var (
				raw   json.RawMessage
				suite *grade.Suite
			)
			if graders != "" {
				var err error
				if raw, suite, err = readGradersFile(graders); err != nil {
					return err
				}
			}
			fs := cmd.Flags()
			a.envDefault(fs, "server", "GYRE_SERVER", &server)
			a.envDefault(fs, "key", "GYRE_KEY", &key)
			a.envDefault(fs, "blob", "GYRE_BLOB", &bl)
			if (server == "") != (key == "") {
				return usagef("--server and --key go together")
			}
			var (
				res eval.RegradeResult
				err error
			)
			if server != "" {
				rr, rerr := eval.NewRemoteRecorder(server, key, nil)
				if rerr != nil {
					return usageError{rerr}
				}
				res, err = rr.Regrade(cmd.Context(), id, raw)
			} else {
				res, err = a.regradeEmbedded(cmd, id, tenant, bl, suite)
			}
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("no experiment %s", id)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONTo(a.stdout, regradeJSON{Summary: res.Report.Summary, Regraded: res.Regraded, Skipped: res.Skipped})
			}
			fmt.Fprintf(a.stderr, "regraded %d runs%s\n", res.Regraded, skippedText(res.Skipped))
			printReport(a.stdout, res.Report)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&graders, "graders", "", "grade with this list of grader declarations (YAML or JSON) instead of the runs' own")
	fs.BoolVar(&asJSON, "json", false, "print the new summary as JSON")
	fs.StringVar(&server, "server", "", "regrade on this gyre serve [$GYRE_SERVER]")
	fs.StringVar(&key, "key", "", "admin or evaluator key for --server [$GYRE_KEY]")
	fs.StringVar(&tenant, "tenant", "default", "tenant of the embedded store")
	fs.StringVar(&bl, "blob", "", "blob store of the embedded mode: empty for a directory in --data, file:///dir or s3://bucket?… [$GYRE_BLOB]")
	return cmd
}

// regradeEmbedded regrades in the embedded store, grading as gyre eval run
// does: command graders run here, judges use the config file's policies:.
func (a *app) regradeEmbedded(cmd *cobra.Command, id, tenant, blobURL string, suite *grade.Suite) (eval.RegradeResult, error) {
	c, _, err := a.config(cmd, false)
	if err != nil {
		return eval.RegradeResult{}, err
	}
	var res eval.RegradeResult
	err = a.withStore(cmd, func(ctx context.Context, st store.Store) error {
		t, err := tenantByName(ctx, st, tenant)
		if err != nil {
			return err
		}
		blobs, err := blobstore.Open(ctx, blobURL, c.Data)
		if err != nil {
			return fmt.Errorf("--blob: %w", err)
		}
		defer blobs.Close()
		log := a.logger(c)
		// The same grading environment as gyre eval run's: command graders
		// run here, judges through the config file's policies:, their
		// calls recorded in this store.
		env := grade.Env{Logger: log, AllowCommand: func(grade.Subject, []string) bool { return true },
			Subject: grade.Subject{TenantID: t.ID, TenantName: t.Name}}
		if env.Judge, err = cliJudge(c, st.RecordGradingCall, log); err != nil {
			return err
		}
		rg := eval.Regrader{Store: st, Blobs: blobs, Tenant: t.ID, Env: env}
		res, err = rg.Regrade(ctx, id, suite)
		if errors.Is(err, eval.ErrNoGraders) {
			return fmt.Errorf("%w; pass --graders FILE", err)
		}
		return err
	})
	return res, err
}

// readGradersFile reads a list of grader declarations, YAML or JSON, and
// compiles it; a bad declaration is a usage error naming its place.
func readGradersFile(path string) (json.RawMessage, *grade.Suite, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, usagef("--graders: %v", err)
	}
	raw := json.RawMessage(bytes.TrimSpace(b))
	if !json.Valid(raw) {
		var v any
		if err := yaml.Unmarshal(b, &v); err != nil {
			return nil, nil, usagef("--graders %s: neither JSON nor YAML: %v", path, err)
		}
		if raw, err = json.Marshal(v); err != nil {
			return nil, nil, usagef("--graders %s: %v", path, err)
		}
	}
	specs, err := grade.ParseSpecsAt(raw, "")
	if err != nil {
		return nil, nil, usagef("--graders %s: %v", path, err)
	}
	s, err := grade.Compile(specs)
	if err != nil {
		return nil, nil, usagef("--graders %s: %v", path, err)
	}
	return raw, &s, nil
}

func skippedText(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[k], k)
	}
	return "; left as they were: " + strings.Join(parts, ", ")
}
