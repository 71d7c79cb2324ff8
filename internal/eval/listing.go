package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/gyrehq/gyre/harnesskit"
)

// ListRuns fetches one page of GET /runs (capability run_listing) with
// the contract's filters in q (query, user_id, client_id, limit, offset,
// since, until), sent as given. The answer, at most Limits.RunStatus
// bytes, must be a RunList: runs an array of items with a string run_id,
// total an integer of at least 0; anything else is a KindInvalid
// *CallError.
func (c *Client) ListRuns(ctx context.Context, q url.Values) (harnesskit.RunList, error) {
	const op = "GET /runs"
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	path := "/runs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	resp, err := c.call(ctx, op, http.MethodGet, path, nil, "", http.StatusOK)
	if err != nil {
		return harnesskit.RunList{}, err
	}
	raw, err := readJSON(op, resp, c.limits.RunStatus)
	if err != nil {
		return harnesskit.RunList{}, err
	}
	l, err := decodeRunList(raw)
	if err != nil {
		return harnesskit.RunList{}, invalid(op, "schema", err)
	}
	return l, nil
}

// decodeRunList decodes and checks a RunList.
func decodeRunList(raw []byte) (harnesskit.RunList, error) {
	var m struct {
		Runs  *[]map[string]json.RawMessage `json:"runs"`
		Total *json.Number                  `json:"total"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return harnesskit.RunList{}, fmt.Errorf("RunList does not match the contract: %w", err)
	}
	if m.Runs == nil {
		return harnesskit.RunList{}, errors.New("RunList has no runs array")
	}
	if m.Total == nil {
		return harnesskit.RunList{}, errors.New("RunList has no total")
	}
	if n, err := m.Total.Int64(); err != nil || n < 0 {
		return harnesskit.RunList{}, fmt.Errorf("RunList total %s is not an integer of at least 0", truncate(m.Total.String(), 32))
	}
	for i, item := range *m.Runs {
		id, ok := item["run_id"]
		if !ok || !isJSONString(id) {
			return harnesskit.RunList{}, fmt.Errorf("RunList runs[%d] has no string run_id", i)
		}
	}
	var l harnesskit.RunList
	if err := json.Unmarshal(raw, &l); err != nil {
		return harnesskit.RunList{}, fmt.Errorf("RunList does not match the contract: %w", err)
	}
	for i, item := range l.Runs {
		if id := item.RunID; id == "" || id == "." || id == ".." || len(id) > maxRunIDLen {
			return harnesskit.RunList{}, fmt.Errorf("RunList runs[%d].run_id %q is not usable as a path segment", i, truncate(id, 64))
		}
	}
	return l, nil
}
