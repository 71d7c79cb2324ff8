package cli

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/eval"
)

// adminFlags are the flags of the admin commands that talk to a running
// gyre serve over its HTTP API (SPEC §14): --server, the key from
// --key-file or GYRE_KEY (never a flag holding the key itself, which ps
// would show), and --json.
type adminFlags struct {
	server  string
	keyFile string
	json    bool
}

// register adds the admin flags to cmd.
func (f *adminFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.server, "server", "", "base URL of the gyre serve to talk to [$GYRE_SERVER]")
	fs.StringVar(&f.keyFile, "key-file", "", "file holding the API key [$GYRE_KEY_FILE]; or set $GYRE_KEY")
	fs.BoolVar(&f.json, "json", false, "print the result as JSON")
}

// adminCall sends one request to the server of f with its key and
// returns the answer. With --json it prints the answer as the server sent
// it (indented) and says so with shown: the command's table is not wanted.
func (a *app) adminCall(cmd *cobra.Command, f *adminFlags, method, path string, body any) (raw json.RawMessage, shown bool, err error) {
	c, err := a.adminClient(cmd, f)
	if err != nil {
		return nil, false, err
	}
	if err := c.Call(cmd.Context(), method, path, body, &raw); err != nil {
		return nil, false, err
	}
	if f.json {
		return raw, true, writeRawJSON(a.stdout, raw)
	}
	return raw, false, nil
}

// client resolves the server and key and returns the API client.
func (a *app) adminClient(cmd *cobra.Command, f *adminFlags) (*eval.RemoteRecorder, error) {
	fs := cmd.Flags()
	a.envDefault(fs, "server", "GYRE_SERVER", &f.server)
	if f.server == "" {
		return nil, usagef("%s: --server (or GYRE_SERVER) is required", cmd.CommandPath())
	}
	key, err := a.adminKey(cmd, f)
	if err != nil {
		return nil, err
	}
	c, err := eval.NewRemoteRecorder(f.server, key, nil)
	if err != nil {
		return nil, usagef("--server: %v", err)
	}
	return c, nil
}

// adminKey reads the API key: --key-file, else GYRE_KEY, else
// GYRE_KEY_FILE.
func (a *app) adminKey(cmd *cobra.Command, f *adminFlags) (string, error) {
	return a.apiKey(cmd, f.keyFile)
}

// apiKey reads the API key of a command with a --key-file flag (whose
// value is keyFile): the flag, else GYRE_KEY, else GYRE_KEY_FILE.
func (a *app) apiKey(cmd *cobra.Command, keyFile string) (string, error) {
	readFile := func(path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", usagef("--key-file: %v", err)
		}
		k := strings.TrimSpace(string(b))
		if k == "" {
			return "", usagef("--key-file: %s is empty", path)
		}
		return k, nil
	}
	if cmd.Flags().Lookup("key-file").Changed {
		return readFile(keyFile)
	}
	if k, ok := a.res.lookupEnv("GYRE_KEY"); ok && strings.TrimSpace(k) != "" {
		return strings.TrimSpace(k), nil
	}
	if p, ok := a.res.lookupEnv("GYRE_KEY_FILE"); ok && p != "" {
		return readFile(p)
	}
	return "", usagef("%s: an API key is required: --key-file F or GYRE_KEY", cmd.CommandPath())
}

// listAll follows a list's cursors and returns every item; path may
// carry a query of its own.
func listAll[T any](ctx context.Context, c *eval.RemoteRecorder, path string) ([]T, error) {
	var all []T
	cursor := ""
	for {
		p := path
		if cursor != "" {
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			p += sep + "cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Items      []T     `json:"items"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := c.Call(ctx, "GET", p, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil || *page.NextCursor == "" {
			return all, nil
		}
		cursor = *page.NextCursor
	}
}

// ptrOrDash prints a missing value as "-".
func ptrOrDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// pathSegment escapes one path segment of an API URL.
func pathSegment(s string) string { return url.PathEscape(s) }
