package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/dataset/build"
)

// datasetCommand is gyre dataset: datasets on a running gyre serve, or
// on its store directly (SPEC §9).
func (a *app) datasetCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dataset",
		Short: "Export frozen training datasets (sft, dpo, rl, atif), from a server or the store",
		Long: `Datasets are frozen selections of one agent's rollouts, built into one file in
the sft, dpo, rl or atif format, with a manifest.

Every subcommand works in one of two modes:

  on a server   with --server URL (or $GYRE_SERVER) and a key from --key-file
                or $GYRE_KEY (admin to export; reader to list, show and
                download); gyre serve builds the dataset.
  on the store  without --server: the store named by --data/--db and the blob
                store named by --blob (or $GYRE_BLOB), like the operator
                commands, in the tenant --tenant (default "default"). Safe
                while gyre serve runs on the same store.

On the store, gyre dataset export creates the dataset exactly as
POST /api/v1/datasets does (same frozen selection, same manifest, same bytes)
and builds it in this process while it holds the build job's lease, renewed
every third of --lease: no gyre serve builds the same dataset meanwhile. If
this process dies, the lease lapses after --lease and a running gyre serve
takes the build over and finishes it, to the same bytes.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRunE,
	}
	cmd.AddCommand(a.datasetExportCommand(), a.datasetListCommand(), a.datasetShowCommand(), a.datasetDownloadCommand())
	return cmd
}

// datasetClient is a server and its key.
type datasetClient struct {
	base string
	key  string
	http *http.Client
}

func datasetFlags(fs *pflag.FlagSet) {
	fs.String("server", "", "gyre server URL; without it, work on the store directly [$GYRE_SERVER]")
	fs.String("key-file", "", "file holding the API key, with --server [$GYRE_KEY_FILE; or set $GYRE_KEY]")
	fs.String("tenant", "default", "tenant of the store, without --server")
	fs.String("blob", "", "blob store, without --server: empty for a directory in --data, file:///dir or s3://bucket?… [$GYRE_BLOB]")
}

// datasetOnServer reports whether a dataset command talks to a server
// (--server or $GYRE_SERVER) rather than the store, and refuses the flags
// of the other mode.
func (a *app) datasetOnServer(cmd *cobra.Command) (bool, error) {
	fs := cmd.Flags()
	var server string
	server, _ = fs.GetString("server")
	a.envDefault(fs, "server", "GYRE_SERVER", &server)
	var storeFlags, serverFlags []string
	for _, n := range []string{"tenant", "blob", "lease", "db", "data"} {
		if f := fs.Lookup(n); f != nil && f.Changed {
			storeFlags = append(storeFlags, "--"+n)
		}
	}
	if f := fs.Lookup("key-file"); f != nil && f.Changed {
		serverFlags = append(serverFlags, "--key-file")
	}
	switch {
	case server != "" && len(storeFlags) > 0:
		return false, usagef("%s work on the store directly, not with --server (or GYRE_SERVER)", strings.Join(storeFlags, ", "))
	case server == "" && len(serverFlags) > 0:
		return false, usagef("--key-file goes with --server")
	}
	return server != "", nil
}

func (a *app) datasetClient(cmd *cobra.Command) (*datasetClient, error) {
	var server string
	fs := cmd.Flags()
	server, _ = fs.GetString("server")
	a.envDefault(fs, "server", "GYRE_SERVER", &server)
	if server == "" {
		return nil, usagef("--server (or GYRE_SERVER) is required")
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("--server: %q is not an http(s) URL", server)
	}
	path, _ := fs.GetString("key-file")
	key, err := a.apiKey(cmd, path)
	if err != nil {
		return nil, err
	}
	return &datasetClient{base: strings.TrimRight(server, "/"), key: key, http: &http.Client{}}, nil
}

// do sends a request and returns the response when its status is want;
// any other status is an error carrying the server's message.
func (c *datasetClient) do(ctx context.Context, method, path string, body []byte, want int) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
				Pointer string `json:"pointer"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			at := ""
			if e.Error.Pointer != "" {
				at = " (at " + e.Error.Pointer + ")"
			}
			return nil, fmt.Errorf("%s %s: %d %s: %s%s", method, path, resp.StatusCode, e.Error.Code, e.Error.Message, at)
		}
		return nil, fmt.Errorf("%s %s: status %d", method, path, resp.StatusCode)
	}
	return resp, nil
}

func (c *datasetClient) getJSON(ctx context.Context, path string, dst any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil, http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(dst)
}

// remoteDataset is what the CLI reads of GET /api/v1/datasets/{id}.
type remoteDataset struct {
	ID               string    `json:"id"`
	State            string    `json:"state"`
	Reason           *string   `json:"reason"`
	AgentID          string    `json:"agent_id"`
	Format           string    `json:"format"`
	RolloutsSelected int       `json:"rollouts_selected"`
	FileSHA256       *string   `json:"file_sha256"`
	FileBytes        *int64    `json:"file_bytes"`
	CreatedAt        time.Time `json:"created_at"`
	Progress         *struct {
		RolloutsRead int64 `json:"rollouts_read"`
		RowsWritten  int64 `json:"rows_written"`
	} `json:"progress"`
	Manifest json.RawMessage `json:"manifest"`
}

func (a *app) datasetExportCommand() *cobra.Command {
	var (
		agent, format, since, until, out string
		minReward, minMargin             float64
		batches                          []string
		includeHoldout                   bool
		wait, lease                      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "export --agent A --format sft|dpo|rl|atif --out PATH",
		Short: "Create a dataset on the server, wait for it and write PATH and PATH.manifest.json",
		Long: `Creates a dataset, waits until it is built and writes the file to PATH and
its manifest to PATH.manifest.json, each through a temporary file renamed into
place, so PATH is whole or absent. --since and --until (RFC 3339) bound the
rollouts' submission time.

With --server (an admin key) the server creates and builds the dataset. Without
it, the dataset is created on the store (--data/--db, --blob, --tenant) exactly
as the server would create it, and built in this process under its build job's
lease (--lease): a running gyre serve leaves it alone, and takes it over if this
process dies. On a terminal, stderr shows a progress bar: rollouts read of those
selected, and rows written.`,
		Example: `  gyre dataset export --agent support-bot --format sft --out sft.jsonl
  gyre dataset export --data /var/lib/gyre --agent support-bot --format dpo --min-margin 0.5 --out dpo.jsonl
  GYRE_KEY=$(cat admin.key) gyre dataset export --server https://gyre.example.com --agent support-bot --format rl --out rl.jsonl`,
		Args: argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			onServer, err := a.datasetOnServer(cmd)
			if err != nil {
				return err
			}
			if agent == "" {
				return usagef("--agent is required")
			}
			if !dataset.Format(format).Valid() {
				return usagef("--format must be one of sft, dpo, rl, atif")
			}
			if out == "" {
				return usagef("--out is required")
			}
			if !onServer {
				if lease < time.Second {
					return usagef("--lease must be at least 1s")
				}
				req := build.Request{AgentID: agent, Format: dataset.Format(format),
					Filters: dataset.Filters{BatchIDs: batches, IncludeHoldout: includeHoldout}}
				for _, t := range []struct {
					flag string
					in   string
					out  **time.Time
				}{{"since", since, &req.Filters.Since}, {"until", until, &req.Filters.Until}} {
					if t.in == "" {
						continue
					}
					v, err := time.Parse(time.RFC3339Nano, t.in)
					if err != nil {
						return usagef("--%s: %q is not an RFC 3339 time", t.flag, t.in)
					}
					*t.out = &v
				}
				if cmd.Flags().Lookup("min-reward").Changed {
					req.Filters.MinReward = &minReward
				}
				if cmd.Flags().Lookup("min-margin").Changed {
					req.Filters.MinMargin = &minMargin
				}
				return a.withDatasetStore(cmd, func(ctx context.Context, ds *storeDatasets) error {
					return ds.export(ctx, req, out, lease, wait)
				})
			}
			c, err := a.datasetClient(cmd)
			if err != nil {
				return err
			}
			body := map[string]any{"agent_id": agent, "format": format}
			if since != "" {
				body["since"] = since
			}
			if until != "" {
				body["until"] = until
			}
			if cmd.Flags().Lookup("min-reward").Changed {
				body["min_reward"] = minReward
			}
			if cmd.Flags().Lookup("min-margin").Changed {
				body["min_margin"] = minMargin
			}
			if len(batches) > 0 {
				body["batch_ids"] = batches
			}
			if includeHoldout {
				body["include_holdout"] = true
			}
			raw, err := json.Marshal(body)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			resp, err := c.do(ctx, http.MethodPost, "/api/v1/datasets", raw, http.StatusCreated)
			if err != nil {
				return err
			}
			var d remoteDataset
			err = json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "dataset %s: %d rollouts selected, building\n", d.ID, d.RolloutsSelected)
			bar := newBuildBar(a.stderr, d.RolloutsSelected)
			d, err = c.waitBuilt(ctx, d, wait, bar)
			bar.finish(err == nil)
			if err != nil {
				return err
			}
			return c.download(ctx, d, out, a.stderr)
		},
	}
	f := cmd.Flags()
	datasetFlags(f)
	f.StringVar(&agent, "agent", "", "agent whose rollouts to export")
	f.StringVar(&format, "format", "", "sft, dpo, rl or atif")
	f.StringVar(&since, "since", "", "only rollouts submitted at or after this RFC 3339 time")
	f.StringVar(&until, "until", "", "only rollouts submitted before this RFC 3339 time")
	f.Float64Var(&minReward, "min-reward", dataset.DefaultMinReward, "sft: least reward of an exported rollout")
	f.Float64Var(&minMargin, "min-margin", dataset.DefaultMinMargin, "dpo: least reward difference of a pair")
	f.StringArrayVar(&batches, "batch", nil, "only this batch's rollouts (repeatable)")
	f.BoolVar(&includeHoldout, "include-holdout", false, "keep rollouts of held-out tasks")
	f.StringVar(&out, "out", "", "file to write; the manifest goes to PATH.manifest.json")
	f.DurationVar(&wait, "wait", 30*time.Minute, "how long to wait for the build")
	f.DurationVar(&lease, "lease", directDatasetLease, "without --server: the build job's lease, renewed every third of it; if this process dies, gyre serve takes the build over once it lapses")
	return cmd
}

// waitBuilt polls the dataset until it is ready or failed.
func (c *datasetClient) waitBuilt(ctx context.Context, d remoteDataset, limit time.Duration, bar *buildBar) (remoteDataset, error) {
	deadline := time.Now().Add(limit)
	delay := 100 * time.Millisecond
	for d.State == "building" {
		if time.Now().After(deadline) {
			return d, fmt.Errorf("dataset %s is still building after %s", d.ID, limit)
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second) // the server records its build's progress every second
		if err := c.getJSON(ctx, "/api/v1/datasets/"+url.PathEscape(d.ID), &d); err != nil {
			return d, err
		}
		if d.Progress != nil {
			bar.set(d.Progress.RolloutsRead, d.Progress.RowsWritten)
		}
	}
	if d.State != "ready" {
		reason := ""
		if d.Reason != nil {
			reason = ": " + *d.Reason
		}
		return d, fmt.Errorf("dataset %s %s%s", d.ID, d.State, reason)
	}
	var m struct {
		Rows int64 `json:"rows"`
	}
	_ = json.Unmarshal(d.Manifest, &m)
	bar.set(int64(d.RolloutsSelected), m.Rows)
	return d, nil
}

// download writes the dataset's file to out and its manifest beside it,
// each through a temporary file renamed into place.
func (c *datasetClient) download(ctx context.Context, d remoteDataset, out string, progress io.Writer) error {
	resp, err := c.do(ctx, http.MethodGet, "/api/v1/datasets/"+url.PathEscape(d.ID)+"/file", nil, http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := writeAtomically(out, resp.Body); err != nil {
		return err
	}
	mresp, err := c.do(ctx, http.MethodGet, "/api/v1/datasets/"+url.PathEscape(d.ID)+"/manifest", nil, http.StatusOK)
	if err != nil {
		return err
	}
	defer mresp.Body.Close()
	if err := writeAtomically(out+".manifest.json", mresp.Body); err != nil {
		return err
	}
	var m struct {
		Rows int `json:"rows"`
	}
	_ = json.Unmarshal(d.Manifest, &m)
	fmt.Fprintf(progress, "dataset %s: %d rows written to %s\n", d.ID, m.Rows, out)
	return nil
}

// writeAtomically writes r to path through a temporary file in the same
// directory, synced and renamed into place.
func writeAtomically(path string, r io.Reader) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, r); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (a *app) datasetListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the tenant's datasets, newest first, as JSON lines",
		Args:  argsUsage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			onServer, err := a.datasetOnServer(cmd)
			if err != nil {
				return err
			}
			if !onServer {
				return a.withDatasetStore(cmd, func(ctx context.Context, ds *storeDatasets) error {
					return ds.list(ctx, a.stdout)
				})
			}
			c, err := a.datasetClient(cmd)
			if err != nil {
				return err
			}
			cursor := ""
			for {
				path := "/api/v1/datasets?limit=500"
				if cursor != "" {
					path += "&cursor=" + url.QueryEscape(cursor)
				}
				var l struct {
					Items      []json.RawMessage `json:"items"`
					NextCursor *string           `json:"next_cursor"`
				}
				if err := c.getJSON(cmd.Context(), path, &l); err != nil {
					return err
				}
				for _, it := range l.Items {
					if err := writeDatasetLine(a.stdout, it); err != nil {
						return err
					}
				}
				if l.NextCursor == nil {
					return nil
				}
				cursor = *l.NextCursor
			}
		},
	}
	datasetFlags(cmd.Flags())
	return cmd
}

func (a *app) datasetShowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print a dataset with its manifest as JSON",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			onServer, err := a.datasetOnServer(cmd)
			if err != nil {
				return err
			}
			if !onServer {
				return a.withDatasetStore(cmd, func(ctx context.Context, ds *storeDatasets) error {
					return ds.show(ctx, args[0], a.stdout)
				})
			}
			c, err := a.datasetClient(cmd)
			if err != nil {
				return err
			}
			var d json.RawMessage
			if err := c.getJSON(cmd.Context(), "/api/v1/datasets/"+url.PathEscape(args[0]), &d); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "%s\n", d)
			return err
		},
	}
	datasetFlags(cmd.Flags())
	return cmd
}

func (a *app) datasetDownloadCommand() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "download ID --out PATH",
		Short: "Write a built dataset to PATH and PATH.manifest.json",
		Args:  argsUsage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			onServer, err := a.datasetOnServer(cmd)
			if err != nil {
				return err
			}
			if out == "" {
				return usagef("--out is required")
			}
			if !onServer {
				return a.withDatasetStore(cmd, func(ctx context.Context, ds *storeDatasets) error {
					return ds.download(ctx, args[0], out)
				})
			}
			c, err := a.datasetClient(cmd)
			if err != nil {
				return err
			}
			var d remoteDataset
			if err := c.getJSON(cmd.Context(), "/api/v1/datasets/"+url.PathEscape(args[0]), &d); err != nil {
				return err
			}
			if d.State != "ready" {
				return errors.New("dataset " + d.ID + " is " + d.State + ", not ready")
			}
			return c.download(cmd.Context(), d, out, a.stderr)
		},
	}
	datasetFlags(cmd.Flags())
	cmd.Flags().StringVar(&out, "out", "", "file to write; the manifest goes to PATH.manifest.json")
	return cmd
}

// writeDatasetLine writes a dataset's API JSON as one line without its
// manifest (gyre dataset show has it).
func writeDatasetLine(w io.Writer, raw []byte) error {
	var d map[string]json.RawMessage
	if err := json.Unmarshal(raw, &d); err != nil {
		return err
	}
	delete(d, "manifest")
	line, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}
