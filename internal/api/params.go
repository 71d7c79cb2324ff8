package api

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

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

// patternParams returns the names of the wildcards of a route pattern
// ("POST /agents/{agent_id}/claim" → agent_id), for checkParams.
func patternParams(pattern string) []string {
	var names []string
	for rest := pattern; ; {
		_, after, ok := strings.Cut(rest, "{")
		if !ok {
			return names
		}
		name, tail, _ := strings.Cut(after, "}")
		if name = strings.TrimSuffix(name, "..."); name != "" && name != "$" {
			names = append(names, name)
		}
		rest = tail
	}
}

// checkParams refuses, before any handler or store sees them, path
// parameters (names, from patternParams) and a query string that are not
// UTF-8 after percent-decoding or hold U+0000: every identifier gyre reads
// is text, and a store must never be asked to compare or keep bytes that
// PostgreSQL refuses with an error that would surface as a 500.
func checkParams(r *http.Request, names []string) *gyre.Error {
	for _, name := range names {
		if v := r.PathValue(name); !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return gyre.Errorf(gyre.CodeInvalidPathParam, "path parameter %s is not valid UTF-8 after percent-decoding, or holds U+0000", name)
		}
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return gyre.Errorf(gyre.CodeInvalidQuery, "the query string is malformed")
	}
	for name, vals := range q {
		if !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
			return gyre.Errorf(gyre.CodeInvalidQuery, "a query parameter name is not valid UTF-8 after percent-decoding, or holds U+0000")
		}
		for _, v := range vals {
			if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				return gyre.Errorf(gyre.CodeInvalidQuery, "query parameter %q is not valid UTF-8 after percent-decoding, or holds U+0000", name)
			}
		}
	}
	return nil
}

// maxIdempotencyKeyLen bounds an Idempotency-Key header, as Stripe does.
const maxIdempotencyKeyLen = 255

// idempotencyKey reads the Idempotency-Key header: "" when absent, else at
// most 255 visible ASCII characters. Anything else (bytes that are not
// UTF-8 included, which PostgreSQL would refuse to store) is 422.
func idempotencyKey(r *http.Request) (string, error) {
	k := r.Header.Get("Idempotency-Key")
	if len(k) > maxIdempotencyKeyLen {
		return "", gyre.Errorf(gyre.CodeInvalidBody, "Idempotency-Key must be at most %d characters", maxIdempotencyKeyLen)
	}
	for i := range len(k) {
		if k[i] < 0x21 || k[i] > 0x7e {
			return "", gyre.Errorf(gyre.CodeInvalidBody, "Idempotency-Key must be visible ASCII characters (no spaces)")
		}
	}
	return k, nil
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
