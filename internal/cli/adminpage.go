package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre/internal/eval"
)

// pageFlags are the paging flags of the admin list commands: one page of
// --limit items from --cursor, or --all pages.
type pageFlags struct {
	limit  int
	cursor string
	all    bool
}

// register adds the paging flags to cmd.
func (p *pageFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.IntVar(&p.limit, "limit", 0, "items per page, 1 to 500 (default: the server's, 50)")
	fs.StringVar(&p.cursor, "cursor", "", "continue from the next_cursor of an earlier page")
	fs.BoolVar(&p.all, "all", false, "follow every page and print all items")
}

// check refuses contradictory paging flags as usage errors.
func (p *pageFlags) check(cmd *cobra.Command) error {
	if cmd.Flags().Lookup("limit").Changed && (p.limit < 1 || p.limit > 500) {
		return usagef("--limit must be from 1 to 500")
	}
	if p.all && p.cursor != "" {
		return usagef("--all and --cursor are exclusive")
	}
	return nil
}

// listPage is one page of an API list, its items kept as sent.
type listPage struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor *string           `json:"next_cursor"`
}

// fetchList reads a list from the API: one page, or every page with
// --all. q holds the filters; the paging parameters are added here.
// raw is the server's answer as sent when one page was read.
func fetchList(ctx context.Context, c *eval.RemoteRecorder, path string, q url.Values, p pageFlags) (page listPage, raw json.RawMessage, err error) {
	if q == nil {
		q = url.Values{}
	}
	if p.limit > 0 {
		q.Set("limit", strconv.Itoa(p.limit))
	}
	if p.cursor != "" {
		q.Set("cursor", p.cursor)
	}
	for {
		u := path
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		var b json.RawMessage
		if err := c.Call(ctx, http.MethodGet, u, nil, &b); err != nil {
			return listPage{}, nil, err
		}
		var pg listPage
		if err := json.Unmarshal(b, &pg); err != nil {
			return listPage{}, nil, fmt.Errorf("GET %s: decode answer: %w", path, err)
		}
		page.Items = append(page.Items, pg.Items...)
		page.NextCursor = pg.NextCursor
		if !p.all {
			return page, b, nil
		}
		if pg.NextCursor == nil || *pg.NextCursor == "" {
			page.NextCursor = nil
			if page.Items == nil {
				page.Items = []json.RawMessage{}
			}
			return page, nil, nil
		}
		q.Set("cursor", *pg.NextCursor)
	}
}

// writeList prints a list read by fetchList: the API's JSON with --json
// (the page as sent, or every item of --all under one "items"), else the
// table that row writes, header first. A further page is announced on
// stderr.
func (a *app) writeList(asJSON bool, page listPage, raw json.RawMessage, header string, row func(tw io.Writer, item json.RawMessage) error) error {
	if asJSON {
		if raw != nil {
			return writeRawJSON(a.stdout, raw)
		}
		return writeJSONTo(a.stdout, page)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range page.Items {
		if err := row(tw, it); err != nil {
			return err
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != nil && *page.NextCursor != "" {
		fmt.Fprintf(a.stderr, "more items: add --cursor %s (or --all)\n", *page.NextCursor)
	}
	return nil
}

// writeRawJSON prints an answer of the API as sent, indented.
func writeRawJSON(w io.Writer, raw json.RawMessage) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return fmt.Errorf("the server's answer is not JSON: %w", err)
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}

// decodeItem decodes one list item into v.
func decodeItem(item json.RawMessage, v any) error {
	if err := json.Unmarshal(item, v); err != nil {
		return fmt.Errorf("decode the server's answer: %w", err)
	}
	return nil
}

// timeOrDash prints a time in RFC 3339 (UTC, seconds), "-" when missing.
func timeOrDash(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// boolOrDash prints a three-valued boolean: "-" when unknown.
func boolOrDash(b *bool) string {
	if b == nil {
		return "-"
	}
	return strconv.FormatBool(*b)
}

// clip shortens s to n characters on one line, for a table cell.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		if s == "" {
			return `""`
		}
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// parseSince reads a --since or --until value: an RFC 3339 time, or a
// duration before now ("24h"); it returns the RFC 3339 text the API
// takes.
func parseSince(flag, v string, now time.Time) (string, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.Format(time.RFC3339Nano), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d).UTC().Format(time.RFC3339Nano), nil
	}
	return "", usagef("--%s %q: want an RFC 3339 time (2031-03-14T15:09:26Z) or a duration before now (24h)", flag, v)
}
