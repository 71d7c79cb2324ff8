package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/rollout"
)

// ownMediaTypeRoutes take bodies that are not JSON: raw bytes, YAML.
var ownMediaTypeRoutes = map[string]bool{
	"PUT /api/v1/fixtures/{name}": true,
	"PUT /api/v1/blobs/{sha256}":  true,
	"POST /api/v1/suites":         true,
}

// gatewayPattern reports whether a route is the LLM gateway's or the
// policy endpoint's, which answer as OpenAI does, not as gyre's own API.
func gatewayPattern(pattern string) bool {
	_, route := routeMethod(pattern)
	return strings.HasPrefix(route, "/gw/") || strings.HasPrefix(route, "/agents/{agent_id}/v1/")
}

// Every route of gyre's own API but those that take raw bytes or YAML
// answers a body declared as anything but JSON with 415, before it is read
// (issue 11, defect 4). The test walks the route table, so a new route is
// covered without a new test.
func TestEveryJSONRouteRefusesOtherMediaTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
	checked := 0
	for pattern := range e.srv.patterns {
		if ownMediaTypeRoutes[pattern] || gatewayPattern(pattern) {
			continue
		}
		checked++
		method, route := routeMethod(pattern)
		path := routePath(route, "", "")
		for _, tc := range []struct{ ct, body string }{
			{"text/plain", `{"max_rollouts":1}`},
			{"application/x-www-form-urlencoded", "max_rollouts=1"},
			{"multipart/form-data; boundary=x", "--x--"},
			{"application/jsonx", `{}`},
			{"not a media type", `{}`},
		} {
			r := e.json(method, path, e.admin, tc.body, "Content-Type", tc.ct, "Lease-Token", "t")
			if r.status != http.StatusUnsupportedMediaType {
				t.Errorf("%s %s with Content-Type %q: %d %s, want 415", method, path, tc.ct, r.status, r.body)
				continue
			}
			r.wantError(t, http.StatusUnsupportedMediaType, gyre.CodeUnsupportedMedia, "")
		}
	}
	if checked < 20 {
		t.Fatalf("only %d routes checked: the route table was not walked", checked)
	}
	for pattern := range ownMediaTypeRoutes {
		if !e.srv.patterns[pattern] {
			t.Errorf("%s is exempt from the JSON check but is not a route", pattern)
		}
	}
}

// The flywheel/1 routes whose body is empty or optional keep answering a
// request with no body, whatever Content-Type it declares (curl -d ""
// declares a form), and JSON routes take JSON with parameters or a +json
// type.
func TestEmptyBodiesAndJSONVariantsAreAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, sqliteEngine, Config{}, withFakeClock(rolloutStart), withRollouts(rollout.Config{}))
	e.batch(e.tasks(2), "")
	for _, ct := range []string{"", "application/x-www-form-urlencoded", "text/plain"} {
		c := e.claimAs(e.agent, "agent-1", "", "", "Content-Type", ct)
		if c.status != http.StatusOK {
			t.Fatalf("empty claim with Content-Type %q: %d %s", ct, c.status, c.body)
		}
		for _, ro := range c.claim.Rollouts {
			r := e.do(http.MethodPost, "/rollouts/"+ro.RolloutID+"/heartbeat", e.agent, nil, "Lease-Token", leaseOf(ro), "Content-Type", ct)
			if r.status != http.StatusOK {
				t.Fatalf("empty heartbeat with Content-Type %q: %d %s", ct, r.status, r.body)
			}
		}
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/vnd.gyre+json", ""} {
		if c := e.claimAs(e.agent, "agent-1", "", `{"max_rollouts":1}`, "Content-Type", ct); c.status != http.StatusOK {
			t.Errorf("claim with Content-Type %q: %d %s", ct, c.status, c.body)
		}
	}
}
