package api

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// Page sizes of list endpoints (SPEC §4.8).
const (
	DefaultPageLimit = 50
	MaxPageLimit     = 500
	maxCursorLen     = 1024
)

// pathUUID returns the path parameter name, percent-decoded, when it is a
// UUID in canonical form (lowercased); otherwise 400 invalid_path_param.
func pathUUID(r *http.Request, name string) (string, error) {
	v := r.PathValue(name)
	if len(v) != 36 {
		return "", errPathParam(name, "a UUID")
	}
	u, err := uuid.Parse(v)
	if err != nil {
		return "", errPathParam(name, "a UUID")
	}
	return u.String(), nil
}

func errPathParam(name, want string) *gyre.Error {
	return gyre.Errorf(gyre.CodeInvalidPathParam, "path parameter %s must be %s", name, want)
}

// queryParams checks that r's query has only the parameters allowed, each
// at most once, and returns it.
func queryParams(r *http.Request, allowed ...string) (map[string]string, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, gyre.Errorf(gyre.CodeInvalidQuery, "the query string is malformed")
	}
	out := make(map[string]string, len(q))
	for name, vals := range q {
		if !slices.Contains(allowed, name) {
			return nil, gyre.Errorf(gyre.CodeInvalidQuery, "unknown query parameter %q (allowed: %s)", name, strings.Join(allowed, ", "))
		}
		if len(vals) > 1 {
			return nil, gyre.Errorf(gyre.CodeInvalidQuery, "query parameter %q is given more than once", name)
		}
		out[name] = vals[0]
	}
	return out, nil
}

// pageOnly reads the query of a list that takes no filter: only limit
// and cursor.
func pageOnly(r *http.Request) (store.Page, error) {
	q, err := queryParams(r, "limit", "cursor")
	if err != nil {
		return store.Page{}, err
	}
	return page(q)
}

// page reads ?limit= and ?cursor= from q (SPEC §4.8).
func page(q map[string]string) (store.Page, error) {
	p := store.Page{Limit: DefaultPageLimit}
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageLimit {
			return p, gyre.Errorf(gyre.CodeInvalidQuery, "limit must be an integer from 1 to %d", MaxPageLimit)
		}
		p.Limit = n
	}
	if v, ok := q["cursor"]; ok {
		if v == "" || len(v) > maxCursorLen {
			return p, gyre.Errorf(gyre.CodeInvalidQuery, "cursor must be a next_cursor value from a previous page")
		}
		p.Cursor = v
	}
	return p, nil
}

// list is the shape of every list answer (SPEC §4.8).
type list[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func newList[T any](items []T, next string) list[T] {
	if items == nil {
		items = []T{}
	}
	l := list[T]{Items: items}
	if next != "" {
		l.NextCursor = &next
	}
	return l
}
