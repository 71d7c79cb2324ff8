package sqlstore

import (
	"errors"
	"testing"
	"testing/fstest"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/store"
)

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7()).String()
	c := encodeCursor("key", id)
	got, err := decodeCursor("key", c)
	if err != nil || got != id {
		t.Fatalf("decodeCursor(encodeCursor(%q)) = %q, %v", id, got, err)
	}
	if got, err := decodeCursor("key", ""); err != nil || got != "" {
		t.Errorf("decodeCursor(\"\") = %q, %v; want the first page", got, err)
	}
}

func TestDecodeCursorRejects(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7()).String()
	for _, c := range []string{
		"not base64!",
		encodeCursor("tenant", id),                       // another list's cursor
		encodeCursor("key", ""),                          // no id
		encodeCursor("key", "123"),                       // not a UUID
		encodeCursor("key", "{"+id+"}"),                  // not canonical
		encodeCursor("key", id+"' OR 1=1 --"),            // junk after the id
		encodeCursor("key", "00000000-0000-0000-0000-0"), // truncated
	} {
		if _, err := decodeCursor("key", c); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("decodeCursor(%q) error = %v, want ErrInvalidCursor", c, err)
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
