// Package storeopen picks and opens gyre's store from the CLI's --db and
// --data settings: SQLite in the data directory by default, PostgreSQL for
// a postgres:// URL.
package storeopen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/pgstore"
	"github.com/gyrehq/gyre/internal/store/sqlitestore"
)

// SQLiteFile is the database file's name inside the data directory.
const SQLiteFile = "gyre.db"

// Options says which store to open.
type Options struct {
	// DB selects the backend. Empty: SQLite at <DataDir>/gyre.db. A
	// postgres:// or postgresql:// URL: PostgreSQL. Otherwise a SQLite
	// file, as a path or as a sqlite: or file: URL (sqlite:///abs/path,
	// sqlite:rel/path, file:/abs/path).
	DB string
	// DataDir is gyre's data directory, created with mode 0700 when the
	// SQLite file is placed in it. Required when DB is empty.
	DataDir string
	// Clock stamps stored times. Defaults to the wall clock.
	Clock clock.Clock
	// Logger receives the store's diagnostics. Defaults to discarding them.
	Logger *slog.Logger
	// Migrate applies pending migrations while opening; without it Open
	// refuses a database not at this gyre's schema version.
	Migrate bool
	// InjectedLeaseClock makes PostgreSQL's lease and deadline decisions
	// use Clock instead of the database's clock. Only for tests that
	// drive time; SQLite always uses Clock.
	InjectedLeaseClock bool
}

// target is a parsed Options.DB.
type target struct {
	engine string // "sqlite" or "postgres"
	loc    string // file path or connection URL
}

// Open opens the store o selects.
func Open(ctx context.Context, o Options) (store.Store, error) {
	t, err := resolve(o)
	if err != nil {
		return nil, err
	}
	// Return a nil interface, not a nil *sqlstore.Store, on error.
	switch t.engine {
	case "postgres":
		s, err := pgstore.Open(ctx, pgstore.Config{URL: t.loc, Clock: o.Clock, Logger: o.Logger, Migrate: o.Migrate, InjectedLeaseClock: o.InjectedLeaseClock})
		if err != nil {
			return nil, err
		}
		return s, nil
	default:
		s, err := sqlitestore.Open(ctx, sqlitestore.Config{Path: t.loc, Clock: o.Clock, Logger: o.Logger, Migrate: o.Migrate})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// Migrate brings the selected database up to this gyre's schema (`gyre
// migrate`). Safe to run from several processes at once.
func Migrate(ctx context.Context, o Options) error {
	t, err := resolve(o)
	if err != nil {
		return err
	}
	switch t.engine {
	case "postgres":
		return pgstore.Migrate(ctx, pgstore.Config{URL: t.loc, Logger: o.Logger})
	default:
		return sqlitestore.Migrate(ctx, sqlitestore.Config{Path: t.loc, Logger: o.Logger})
	}
}

// Engine reports which backend o selects ("sqlite" or "postgres") without
// opening anything, for messages and for choosing the bootstrap rule of
// SPEC §3.
func Engine(o Options) (string, error) {
	t, err := resolveName(o.DB)
	if err != nil {
		return "", err
	}
	return t.engine, nil
}

func resolve(o Options) (target, error) {
	t, err := resolveName(o.DB)
	if err != nil {
		return target{}, err
	}
	if t.engine == "sqlite" && t.loc == "" {
		if o.DataDir == "" {
			return target{}, errors.New("no data directory for the SQLite database")
		}
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return target{}, fmt.Errorf("create data directory: %w", err)
		}
		t.loc = filepath.Join(o.DataDir, SQLiteFile)
	}
	return t, nil
}

// resolveName parses Options.DB; an empty loc for SQLite means "in the
// data directory".
func resolveName(db string) (target, error) {
	scheme, rest, hasScheme := strings.Cut(db, ":")
	if !hasScheme || db == "" || len(scheme) == 1 { // no scheme, or a Windows drive letter
		return target{engine: "sqlite", loc: db}, nil
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return target{engine: "postgres", loc: db}, nil
	case "sqlite", "sqlite3", "file":
		p := rest
		if strings.HasPrefix(p, "//") {
			// sqlite:///abs/path or sqlite://localhost/abs/path
			host, path, _ := strings.Cut(strings.TrimPrefix(p, "//"), "/")
			if host != "" && host != "localhost" {
				return target{}, fmt.Errorf("SQLite URL %q names a host", db)
			}
			p = "/" + path
		}
		if i := strings.IndexAny(p, "?#"); i >= 0 {
			return target{}, fmt.Errorf("SQLite URL %q has a query or fragment; gyre sets the connection options itself", db)
		}
		if p == "" {
			return target{}, fmt.Errorf("SQLite URL %q has no path", db)
		}
		return target{engine: "sqlite", loc: p}, nil
	}
	if strings.Contains(db, "://") {
		return target{}, fmt.Errorf("unsupported database URL scheme %q (want postgres:// or a SQLite path)", scheme)
	}
	// A plain path that happens to contain a colon.
	return target{engine: "sqlite", loc: db}, nil
}
