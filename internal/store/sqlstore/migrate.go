package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/gyrehq/gyre/internal/store"
)

// Locker serialises migrations across processes. It blocks until the
// caller holds the lock or ctx ends, and returns the function that
// releases it.
type Locker func(ctx context.Context) (unlock func() error, err error)

// LatestVersion returns the highest version among the goose SQL migrations
// at the root of fsys: the schema version this gyre needs and knows.
func LatestVersion(fsys fs.FS) (int64, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return 0, fmt.Errorf("read migrations: %w", err)
	}
	var latest int64
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		v, err := goose.NumericComponent(e.Name())
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		latest = max(latest, v)
	}
	if latest == 0 {
		return 0, errors.New("no migrations embedded")
	}
	return latest, nil
}

// SchemaVersion returns the highest migration version recorded in db, or 0
// when the database was never migrated.
func SchemaVersion(ctx context.Context, db *sql.DB, d Dialect) (int64, error) {
	var exists bool
	if err := db.QueryRowContext(ctx, d.VersionTableExists).Scan(&exists); err != nil {
		return 0, fmt.Errorf("look for version table: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int64
	q := `SELECT COALESCE(MAX(version_id), 0) FROM ` + versionTable
	if err := db.QueryRowContext(ctx, q).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// CheckSchema reports whether db is migrated exactly to the latest version
// of d's migrations: nil if so, otherwise an error wrapping
// store.ErrSchemaTooNew (a newer gyre migrated it) or store.ErrNotMigrated.
func CheckSchema(ctx context.Context, db *sql.DB, d Dialect) error {
	latest, err := LatestVersion(d.Migrations)
	if err != nil {
		return err
	}
	v, err := SchemaVersion(ctx, db, d)
	if err != nil {
		return err
	}
	return compareVersions(v, latest)
}

func compareVersions(have, want int64) error {
	switch {
	case have > want:
		return fmt.Errorf("schema version %d, this gyre knows up to %d: %w", have, want, store.ErrSchemaTooNew)
	case have < want:
		return fmt.Errorf("schema version %d, this gyre needs %d: %w", have, want, store.ErrNotMigrated)
	}
	return nil
}

// Migrate brings db's schema up to the latest version of d's migrations.
// When the schema is behind it holds lock for the whole run (version check
// included), so several processes may call it at once: one migrates, the
// others wait and then find nothing to do. A database migrated by a newer
// gyre is left alone and reported as store.ErrSchemaTooNew.
func Migrate(ctx context.Context, db *sql.DB, d Dialect, lock Locker, log *slog.Logger) (err error) {
	latest, err := LatestVersion(d.Migrations)
	if err != nil {
		return err
	}
	// Already current (or newer)? Then there is nothing to wait for: a
	// migration commits its tables and its version row together, so a
	// version read without the lock is never ahead of the schema.
	if have, err := SchemaVersion(ctx, db, d); err != nil {
		return err
	} else if have >= latest {
		return compareVersions(have, latest)
	}
	unlock, err := lock(ctx)
	if err != nil {
		return fmt.Errorf("lock migrations: %w", err)
	}
	defer func() {
		if uerr := unlock(); uerr != nil {
			err = errors.Join(err, fmt.Errorf("unlock migrations: %w", uerr))
		}
	}()

	have, err := SchemaVersion(ctx, db, d)
	if err != nil {
		return err
	}
	if have >= latest {
		return compareVersions(have, latest)
	}

	p, err := goose.NewProvider(d.Goose, db, d.Migrations, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	start := time.Now()
	results, err := p.Up(ctx)
	for _, r := range results {
		log.LogAttrs(ctx, slog.LevelInfo, "migration applied",
			slog.String("engine", d.Engine),
			slog.Int64("version", r.Source.Version),
			slog.Duration("duration", r.Duration))
	}
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	log.LogAttrs(ctx, slog.LevelInfo, "database migrated",
		slog.String("engine", d.Engine),
		slog.Int64("from_version", have),
		slog.Int64("to_version", latest),
		slog.Duration("duration", time.Since(start)))
	return CheckSchema(ctx, db, d)
}
