package sqlstore

import (
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/store"
)

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7()).String()
	cur := listCursor("tenant-1", "keys")
	got, err := cur.decodeID(cur.encode(id))
	if err != nil || got != id {
		t.Fatalf("decodeID(encode(%q)) = %q, %v", id, got, err)
	}
	if got, err := cur.decodeID(""); err != nil || got != "" {
		t.Errorf("decodeID(\"\") = %q, %v; want the first page", got, err)
	}
}

// A cursor is valid only for the tenant, list and filter it was issued
// for, and only as issued.
func TestCursorIsBoundToTenantListAndFilter(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7()).String()
	cur := listCursor("tenant-1", "rollouts", "agent-1", "", "")
	raw, _ := base64.RawURLEncoding.DecodeString(cur.encode(id))
	edited := base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), id, uuid.Must(uuid.NewV7()).String(), 1)))
	for name, c := range map[string]string{
		"not base64":            "not base64!",
		"another tenant's":      listCursor("tenant-2", "rollouts", "agent-1", "", "").encode(id),
		"another list's":        listCursor("tenant-1", "tasks", "agent-1", "", "").encode(id),
		"another filter's":      listCursor("tenant-1", "rollouts", "agent-2", "", "").encode(id),
		"no filter's":           listCursor("tenant-1", "rollouts", "", "", "").encode(id),
		"a filter moved":        listCursor("tenant-1", "rollouts", "", "agent-1", "").encode(id),
		"edited":                edited,
		"no position":           cur.encode(""),
		"not a UUID":            cur.encode("123"),
		"not canonical":         cur.encode("{" + id + "}"),
		"junk after the id":     cur.encode(id + "' OR 1=1 --"),
		"an unbound old cursor": base64.RawURLEncoding.EncodeToString([]byte("rollouts:" + id)),
	} {
		if _, err := cur.decodeID(c); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("%s cursor %q: error = %v, want ErrInvalidCursor", name, c, err)
		}
	}
}

func TestLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[int]int{-5: 50, 0: 50, 1: 1, 50: 50, 499: 499, 500: 500, 501: 500, 1 << 30: 500} {
		if got := limit(store.Page{Limit: in}); got != want {
			t.Errorf("limit(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		have, want int64
		err        error
	}{
		{3, 3, nil},
		{0, 3, store.ErrNotMigrated},
		{2, 3, store.ErrNotMigrated},
		{4, 3, store.ErrSchemaTooNew},
	}
	for _, tc := range tests {
		err := compareVersions(tc.have, tc.want)
		if (tc.err == nil) != (err == nil) || (tc.err != nil && !errors.Is(err, tc.err)) {
			t.Errorf("compareVersions(%d, %d) = %v, want %v", tc.have, tc.want, err, tc.err)
		}
	}
}

func TestLatestVersion(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"00001_init.sql":       {},
		"00012_more.sql":       {},
		"00003_between.sql":    {},
		"README.md":            {},
		"sub/00099_nested.sql": {},
	}
	if v, err := LatestVersion(fsys); err != nil || v != 12 {
		t.Errorf("LatestVersion = %d, %v; want 12", v, err)
	}
	if _, err := LatestVersion(fstest.MapFS{"README.md": {}}); err == nil {
		t.Error("LatestVersion of no migrations succeeded")
	}
	if _, err := LatestVersion(fstest.MapFS{"init.sql": {}}); err == nil {
		t.Error("LatestVersion of an unversioned file succeeded")
	}
}

func TestLockKey(t *testing.T) {
	t.Parallel()
	if LockKey("a", "migrate") == LockKey("b", "migrate") || LockKey("a", "migrate") == LockKey("a", "bootstrap") {
		t.Error("lock keys collide across namespaces or names")
	}
	if LockKey("a", "migrate") != LockKey("a", "migrate") {
		t.Error("lock key is not stable")
	}
}

// fromJSONText skips json.Unmarshal for a literal without escapes: it
// must read every literal as json.Unmarshal does.
func TestFromJSONTextReadsWhatUnmarshalReads(t *testing.T) {
	t.Parallel()
	for _, lit := range []string{`""`, `"gpt-4o"`, `"héllo wörld"`, `"a\"b"`, `"a\\b"`, `"a\u0000b"`, `"\u00e9"`, "\"tab\there\"",
		"\"bad \xff utf8\"", `"unterminated`, `x"`, `"`, `"a"b"`, `123`, `"line\nbreak"`, "\"\u2028\"", `"<>&"`} {
		var want string
		wantErr := json.Unmarshal([]byte(lit), &want)
		got, err := fromJSONText(sql.NullString{String: lit, Valid: true})
		switch {
		case (err != nil) != (wantErr != nil):
			t.Errorf("%q: error %v, json.Unmarshal's %v", lit, err, wantErr)
		case err == nil && *got != want:
			t.Errorf("%q: read %q, json.Unmarshal reads %q", lit, *got, want)
		}
	}
}

func FuzzFromJSONText(f *testing.F) {
	for _, s := range []string{`"m"`, `"a\"b"`, "\"\xff\"", `"\u0041"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		var want string
		wantErr := json.Unmarshal([]byte(lit), &want)
		got, err := fromJSONText(sql.NullString{String: lit, Valid: true})
		if (err != nil) != (wantErr != nil) || err == nil && *got != want {
			t.Fatalf("%q: read %v, %v; json.Unmarshal reads %q, %v", lit, got, err, want, wantErr)
		}
	})
}
