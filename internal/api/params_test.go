package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/rollout"
)

// routePath is a path matching a route pattern's path, each wildcard
// filled with a value of its grammar, except bad, which fills the
// wildcard named badName.
func routePath(route, badName, bad string) string {
	valid := map[string]string{
		"id": "0192f0c4-0000-7000-8000-000000000001", "rollout_id": "0192f0c4-0000-7000-8000-000000000002",
		"agent_id": "agent-1", "name": "n", "version": "v1", "case_id": "c1", "repetition": "1",
		"sha256": strings.Repeat("0", 64), "token": "tok",
	}
	var b strings.Builder
	for rest := route; ; {
		before, after, ok := strings.Cut(rest, "{")
		b.WriteString(before)
		if !ok {
			return b.String()
		}
		name, tail, _ := strings.Cut(after, "}")
		name = strings.TrimSuffix(name, "...")
		v, ok := valid[name]
		if !ok {
			v = "x"
		}
		if name == badName {
			v = bad
		}
		b.WriteString(v)
		rest = tail
	}
}

// routeMethod is the method a pattern answers, GET for method-less ones.
func routeMethod(pattern string) (method, route string) {
	if m, r, ok := strings.Cut(pattern, " "); ok {
		return m, r
	}
	return http.MethodGet, pattern
}

// errorCode reads error.code from gyre's error shape or the gateway's
// OpenAI shape, which both nest it there.
func errorCode(t *testing.T, r response) string {
	t.Helper()
	var b struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("status %d body %q is not an error body: %v", r.status, r.body, err)
	}
	return b.Error.Code
}

// Every route refuses a path parameter or query string that is not UTF-8
// after percent-decoding or holds U+0000, with the same answer on every
// store, before any handler or store sees it (issue 11, defects 1 and 2).
func TestIdentifiersMustBeUTF8(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{})
			inference := e.key("inference")
			withParams := 0
			for pattern := range e.srv.patterns {
				method, route := routeMethod(pattern)
				for _, name := range patternParams(route) {
					withParams++
					for _, bad := range []string{"%FF", "a%C3%28b", "%ED%A0%80", "a%00b"} {
						path := routePath(route, name, bad)
						r := e.do(method, path, inference, strings.NewReader(`{}`))
						if r.status != http.StatusBadRequest || errorCode(t, r) != "invalid_path_param" {
							t.Errorf("%s %s: %d %s, want 400 invalid_path_param", method, path, r.status, r.body)
						}
					}
				}
				for _, query := range []string{"?agent_id=%FF", "?%FF=1", "?cursor=%C0%AF", "?agent_id=a%00b", "?a%00=1"} {
					path := routePath(route, "", "") + query
					r := e.do(method, path, e.admin, strings.NewReader(`{}`))
					if r.status != http.StatusBadRequest || errorCode(t, r) != "invalid_query" {
						t.Errorf("%s %s: %d %s, want 400 invalid_query", method, path, r.status, r.body)
					}
				}
			}
			if withParams < 10 {
				t.Fatalf("only %d route wildcards checked: the route table was not walked", withParams)
			}
		})
	}
}

// An Idempotency-Key is stored as text: one that is not visible ASCII
// (bytes that are not UTF-8 included) or is longer than 255 characters is
// refused with the same 422 on every store, never stored (defect 1).
func TestIdempotencyKeyMustBeVisibleASCII(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
			tasks := e.tasks(1)
			for _, tc := range []struct {
				name, key string
				ok        bool
			}{
				{"visible ASCII", "retry-1_A.b~c", true},
				{"255 characters", strings.Repeat("k", 255), true},
				{"not UTF-8", "k\xff", false},
				{"UTF-8 but not ASCII", "clé", false},
				{"a space", "a b", false},
				{"256 characters", strings.Repeat("k", 256), false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ids, _ := json.Marshal(tasks)
					b := e.json(http.MethodPost, "/api/v1/batches", e.admin, `{"agent_id":"agent-1","task_ids":`+string(ids)+`}`, "Idempotency-Key", tc.key)
					c := e.claimAs(e.agent, "agent-1", "", "", "Idempotency-Key", tc.key)
					if tc.ok {
						if b.status != http.StatusCreated || c.status != http.StatusOK {
							t.Fatalf("batch %d %s, claim %d %s: want 201 and 200", b.status, b.body, c.status, c.body)
						}
						return
					}
					b.wantError(t, http.StatusUnprocessableEntity, "invalid_body", "")
					c.wantError(t, http.StatusUnprocessableEntity, "invalid_body", "")
				})
			}
		})
	}
}
