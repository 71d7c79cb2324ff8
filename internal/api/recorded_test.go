package api

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/rollout"
)

// TestBlobs_ServedOnlyToATenantThatReferencesThem: GET /api/v1/blobs/{sha}
// streams a blob the tenant uploaded or a fixture revision's content, with
// its stored Content-Type; a digest the tenant does not reference is 404
// even when another tenant stored those very bytes.
func TestBlobs_ServedOnlyToATenantThatReferencesThem(t *testing.T) {
	t.Parallel()
	type setup struct {
		name  string
		eng   engine
		blobs blobBackend
	}
	for _, s := range []setup{{"sqlite-file", sqliteEngine, fileBlobs}, {"postgres-file", postgresEngine, fileBlobs}, {"sqlite-s3", sqliteEngine, s3Blobs}} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, s.eng, Config{}, withBlobs(s.blobs))
			traj, fixture := `{"schema_version":"ATIF-v1.7"}`, "id,amount\n7,12.50\n"
			ev := e.key(gyre.RoleEvaluator)
			if r := e.do(http.MethodPut, "/api/v1/blobs/"+sha256Hex(traj), ev, strings.NewReader(traj), "Content-Type", "application/octet-stream"); r.status != http.StatusCreated {
				t.Fatalf("PUT blob: %d %s", r.status, r.body)
			}
			if r := e.putFixture(e.admin, "orders.csv", fixture); r.status != http.StatusCreated {
				t.Fatalf("PUT fixture: %d %s", r.status, r.body)
			}
			rd := e.key(gyre.RoleReader)
			for _, content := range []string{traj, fixture} {
				r := e.do(http.MethodGet, "/api/v1/blobs/"+sha256Hex(content), rd, nil)
				if r.status != http.StatusOK || string(r.body) != content {
					t.Fatalf("GET %q: %d %q", content, r.status, r.body)
				}
				if ct := r.header.Get("Content-Type"); ct != "application/octet-stream" {
					t.Errorf("Content-Type = %q, want the stored application/octet-stream", ct)
				}
				if r.header.Get("Content-Length") != strconv.Itoa(len(content)) || r.header.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("headers %v", r.header)
				}
			}
			// Another tenant: the same digests are not its blobs.
			_, otherAdmin := e.newTenant("other")
			for _, content := range []string{traj, fixture} {
				e.do(http.MethodGet, "/api/v1/blobs/"+sha256Hex(content), otherAdmin, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			}
			// Once it stores the bytes itself, they are.
			e.do(http.MethodPut, "/api/v1/fixtures/mine.csv", otherAdmin, strings.NewReader(fixture), "Content-Type", "application/octet-stream")
			if r := e.do(http.MethodGet, "/api/v1/blobs/"+sha256Hex(fixture), otherAdmin, nil); r.status != http.StatusOK || string(r.body) != fixture {
				t.Errorf("the other tenant's own fixture: %d %q", r.status, r.body)
			}
			e.do(http.MethodGet, "/api/v1/blobs/"+sha256Hex("never stored"), rd, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
			e.do(http.MethodGet, "/api/v1/blobs/"+sha256Hex(traj), e.key(gyre.RoleAgent), nil).wantError(t, http.StatusForbidden, gyre.CodeForbidden, "")
		})
	}
}

// TestRecordedReads_RefuseBadInput: every read of what was recorded
// answers bad input with 400 and the code of the part at fault.
func TestRecordedReads_RefuseBadInput(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			testRecordedReadsRefuseBadInput(t, newEnv(t, eng, Config{}, withBlobs(fileBlobs)))
		})
	}
}

func testRecordedReadsRefuseBadInput(t *testing.T, e *env) {
	rd := e.key(gyre.RoleReader)
	sum := sha256Hex("x")
	cases := []struct {
		path string
		code string
	}{
		{"/api/v1/blobs/NOTASHA", gyre.CodeInvalidPathParam},
		{"/api/v1/blobs/" + strings.ToUpper(sum), gyre.CodeInvalidPathParam},
		{"/api/v1/blobs/" + sum[:63], gyre.CodeInvalidPathParam},
		{"/api/v1/blobs/" + sum + "0", gyre.CodeInvalidPathParam},
		{"/api/v1/blobs/" + sum + "?x=1", gyre.CodeInvalidQuery},
		{"/api/v1/calls?since=yesterday", gyre.CodeInvalidQuery},
		{"/api/v1/calls?since=2031-03-14", gyre.CodeInvalidQuery},
		{"/api/v1/calls?agent_id=" + strings.Repeat("a", 300), gyre.CodeInvalidQuery},
		{"/api/v1/calls?agent_id=", gyre.CodeInvalidQuery},
		{"/api/v1/calls?agent_id=%FF", gyre.CodeInvalidQuery},
		{"/api/v1/calls?agent_id=a%00b", gyre.CodeInvalidQuery},
		{"/api/v1/calls?since=%FF", gyre.CodeInvalidQuery},
		{"/api/v1/calls?cursor=%FF", gyre.CodeInvalidQuery},
		{"/api/v1/blobs/%FF", gyre.CodeInvalidPathParam},
		{"/api/v1/calls?rollout_id=x", gyre.CodeInvalidQuery},
		{"/api/v1/calls?cursor=garbage", gyre.CodeInvalidQuery},
		{"/api/v1/calls?limit=0", gyre.CodeInvalidQuery},
		{"/api/v1/rollouts/not-a-uuid/calls", gyre.CodeInvalidPathParam},
		{"/api/v1/rollouts/" + uuid.Must(uuid.NewV7()).String() + "/calls?agent_id=x", gyre.CodeInvalidQuery},
		{"/api/v1/rollouts/not-a-uuid/trajectory", gyre.CodeInvalidPathParam},
		{"/api/v1/rollouts/" + uuid.Must(uuid.NewV7()).String() + "/trajectory?x=1", gyre.CodeInvalidQuery},
	}
	for _, tc := range cases {
		e.do(http.MethodGet, tc.path, rd, nil).wantError(t, http.StatusBadRequest, tc.code, "")
	}
	e.do(http.MethodGet, "/api/v1/rollouts/"+uuid.Must(uuid.NewV7()).String()+"/calls", rd, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
	e.do(http.MethodGet, "/api/v1/rollouts/"+uuid.Must(uuid.NewV7()).String()+"/trajectory", rd, nil).wantError(t, http.StatusNotFound, gyre.CodeNotFound, "")
	if r := e.do(http.MethodGet, "/api/v1/calls?since=2031-03-14T15:09:26.5Z&agent_id=support-bot", rd, nil); r.status != http.StatusOK ||
		strings.TrimSpace(string(r.body)) != `{"items":[],"next_cursor":null}` {
		t.Errorf("an empty list: %d %s", r.status, r.body)
	}
}

// TestTrajectory_ConflictWithoutACountedCompletion: a rollout that made
// no counted completion has no trajectory yet: 409, not an empty
// document that the ATIF validator would refuse.
func TestTrajectory_ConflictWithoutACountedCompletion(t *testing.T) {
	t.Parallel()
	for _, eng := range engines() {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, eng, Config{}, withBlobs(fileBlobs), withRollouts(rollout.Config{}))
			e.batch(e.tasks(1), "")
			rr := e.claimOne()
			rd := e.key(gyre.RoleReader)
			e.do(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/trajectory", rd, nil).wantError(t, http.StatusConflict, gyre.CodeConflict, "")
			if r := e.do(http.MethodGet, "/api/v1/rollouts/"+rr.RolloutID+"/calls", rd, nil); r.status != http.StatusOK ||
				strings.TrimSpace(string(r.body)) != `{"items":[],"next_cursor":null}` {
				t.Errorf("calls of a rollout without any: %d %s", r.status, r.body)
			}
		})
	}
}
