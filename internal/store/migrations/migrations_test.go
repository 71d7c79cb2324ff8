package migrations

import (
	"io/fs"
	"slices"
	"testing"
)

// TestEnginesHaveTheSameVersions: the two directories must stay in step,
// file for file, so that both engines are at the same schema version.
func TestEnginesHaveTheSameVersions(t *testing.T) {
	names := func(fsys fs.FS, dir string) []string {
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	sqlite, pg := names(SQLite, "sqlite"), names(Postgres, "postgres")
	if len(sqlite) == 0 || !slices.Equal(sqlite, pg) {
		t.Errorf("migration files differ:\nsqlite:   %v\npostgres: %v", sqlite, pg)
	}
}
