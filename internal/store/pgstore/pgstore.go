// Package pgstore is gyre's production store: PostgreSQL through
// github.com/jackc/pgx/v5 (a pgxpool, exposed to database/sql with
// stdlib.OpenDBFromPool) behind the shared sqlstore implementation. Several
// gyre processes may share one database: migrations run under a session
// advisory lock and bootstrap under a transaction advisory lock.
package pgstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store/migrations"
	"github.com/gyrehq/gyre/internal/store/sqlstore"
)

// PostgreSQL error codes the store classifies.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

// DefaultMaxConns is the connection pool's size unless the URL sets
// pool_max_conns.
const DefaultMaxConns = 32

// Config configures Open and Migrate.
type Config struct {
	// URL is a postgres:// or postgresql:// connection URL (or a libpq
	// keyword string). pgxpool settings such as pool_max_conns may be
	// given in it. Required.
	URL string
	// Clock stamps stored times. Defaults to the wall clock.
	Clock clock.Clock
	// InjectedLeaseClock makes lease and deadline decisions use Clock
	// instead of the database's clock. Only tests that drive time set it:
	// replicas must share the database's clock (SPEC §4.5).
	InjectedLeaseClock bool
	// Logger receives diagnostics. Defaults to discarding them.
	Logger *slog.Logger
	// Migrate applies pending migrations during Open. Without it Open
	// refuses a database that is not at this gyre's schema version
	// (store.ErrNotMigrated, store.ErrSchemaTooNew).
	Migrate bool
	// Schema, if set, is the schema the store lives in: it becomes the
	// search_path of every connection. It must exist. Tests use a fresh
	// schema per test; production leaves it empty (the URL's search_path,
	// or the server default).
	Schema string
}

// Dialect returns the PostgreSQL dialect of sqlstore.
func Dialect() sqlstore.Dialect {
	sub, err := fs.Sub(migrations.Postgres, "postgres")
	if err != nil {
		panic(err) // the embedded directory is fixed at build time
	}
	return sqlstore.Dialect{
		Engine:     "postgres",
		Goose:      goose.DialectPostgres,
		Migrations: sub,
		VersionTableExists: `SELECT EXISTS (SELECT 1 FROM pg_tables
			WHERE schemaname = current_schema() AND tablename = 'goose_db_version')`,
		TxLock:            `SELECT pg_advisory_xact_lock($1)`,
		LockRows:          ` FOR UPDATE OF r`,
		SkipLocked:        ` FOR UPDATE OF r SKIP LOCKED`,
		NowExpr:           `CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)`,
		OneStatementClaim: true,
		// Best effort and bounded: a batch's answer never waits long
		// behind a vacuum holding the table's lock, or on a slow sample.
		AnalyzeRollouts: []string{`SET LOCAL lock_timeout = '200ms'`, `SET LOCAL statement_timeout = '5s'`,
			`ANALYZE rollouts`},
		JSONArrayText: `jsonb_array_elements_text(CAST(%s AS jsonb)) AS j(value)`,
		// A document may hold the escape \u0000, which PostgreSQL refuses
		// to decode; as \u0020 (same length, still valid JSON, also after
		// an escaped backslash) no member changes its type.
		JSONIsString:      `CASE WHEN json_typeof(CAST(replace(%[1]s, '\u0000', '\u0020') AS json) -> '%[2]s') = 'string' THEN 1 ELSE 0 END`,
		IsUniqueViolation: hasCode(codeUniqueViolation),
		IsRetryable:       hasCode(codeSerializationFailure, codeDeadlockDetected),
	}
}

func hasCode(codes ...string) func(error) bool {
	return func(err error) bool {
		var e *pgconn.PgError
		if !errors.As(err, &e) {
			return false
		}
		for _, c := range codes {
			if e.Code == c {
				return true
			}
		}
		return false
	}
}

// handles is an open pool, its database/sql view and the lock namespace.
type handles struct {
	pool *pgxpool.Pool
	db   *sql.DB
	ns   string
}

func (h handles) close() error {
	err := h.db.Close()
	h.pool.Close()
	return err
}

func connect(ctx context.Context, cfg Config) (handles, error) {
	if cfg.URL == "" {
		return handles{}, errors.New("postgres: no database URL")
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return handles{}, fmt.Errorf("postgres: %w", err)
	}
	if cfg.Schema != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{cfg.Schema}.Sanitize()
	}
	// pgxpool's default (four connections on a small machine) would queue
	// concurrent claims and heartbeats behind each other; connections are
	// opened only as load needs them. pool_max_conns in the URL overrides.
	if !strings.Contains(cfg.URL, "pool_max_conns") {
		pc.MaxConns = DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return handles{}, fmt.Errorf("postgres: %w", err)
	}
	// Stores in different schemas of one database must not share advisory
	// locks: the schema they resolve to names their lock namespace,
	// however it was chosen (Schema, a search_path in the URL, the
	// server's default).
	var ns string
	if err := pool.QueryRow(ctx, `SELECT COALESCE(current_schema(), '')`).Scan(&ns); err != nil {
		pool.Close()
		return handles{}, fmt.Errorf("postgres: connect: %w", err)
	}
	return handles{pool: pool, db: stdlib.OpenDBFromPool(pool), ns: ns}, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Open connects to the database at cfg.URL, migrating it first when
// cfg.Migrate is set.
func Open(ctx context.Context, cfg Config) (*sqlstore.Store, error) {
	cfg = withDefaults(cfg)
	h, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d := Dialect()
	ml, err := migrationLock(h)
	if err != nil {
		return nil, errors.Join(err, h.close())
	}
	if cfg.Migrate {
		if err := sqlstore.Migrate(ctx, h.db, d, ml, cfg.Logger); err != nil {
			return nil, errors.Join(fmt.Errorf("postgres: %w", err), h.close())
		}
	}
	if err := sqlstore.CheckSchema(ctx, h.db, d); err != nil {
		return nil, errors.Join(fmt.Errorf("postgres: %w", err), h.close())
	}
	s, err := sqlstore.New(sqlstore.Config{
		Dialect:       d,
		Writer:        h.db,
		Clock:         cfg.Clock,
		DatabaseClock: !cfg.InjectedLeaseClock,
		Logger:        cfg.Logger,
		MigrationLock: ml,
		LockNamespace: h.ns,
		OnClose:       func() error { h.pool.Close(); return nil },
	})
	if err != nil {
		return nil, errors.Join(err, h.close())
	}
	return s, nil
}

// Migrate brings the database at cfg.URL up to this gyre's schema, with a
// pool of its own (what `gyre migrate` runs). Safe to run from several
// processes at once; store.ErrSchemaTooNew if a newer gyre already
// migrated it.
func Migrate(ctx context.Context, cfg Config) error {
	cfg = withDefaults(cfg)
	h, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	ml, err := migrationLock(h)
	if err == nil {
		err = sqlstore.Migrate(ctx, h.db, Dialect(), ml, cfg.Logger)
		if err != nil {
			err = fmt.Errorf("postgres: %w", err)
		}
	}
	return errors.Join(err, h.close())
}

// migrationLock returns the Locker that serialises migrations of one
// schema: a session advisory lock held, for the whole migration, on a
// connection of its own. PostgreSQL releases it if the holder dies.
func migrationLock(h handles) (sqlstore.Locker, error) {
	l := advisoryLocker{key: sqlstore.LockKey(h.ns, "migrate")}
	return func(ctx context.Context) (func() error, error) {
		conn, err := h.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		if err := l.SessionLock(ctx, conn); err != nil {
			// The wait may have been cancelled just as the lock was
			// granted: never hand a connection that might hold it back to
			// the pool.
			return nil, errors.Join(err, discard(conn))
		}
		return func() error {
			err := l.SessionUnlock(context.WithoutCancel(ctx), conn)
			if err != nil {
				return errors.Join(err, discard(conn))
			}
			return conn.Close()
		}, nil
	}, nil
}

// advisoryLocker is a goose lock.SessionLocker that waits in
// pg_advisory_lock instead of polling pg_try_advisory_lock like goose's
// own (whose period is at least a second): a waiting replica proceeds the
// moment the migrating one finishes, and the wait ends with ctx (pgx
// cancels the statement).
type advisoryLocker struct{ key int64 }

var _ lock.SessionLocker = advisoryLocker{}

// SessionLock blocks until the session holds the lock or ctx ends.
func (l advisoryLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, l.key); err != nil {
		return fmt.Errorf("pg_advisory_lock: %w", err)
	}
	return nil
}

// SessionUnlock releases the lock; it is an error if the session did not
// hold it.
func (l advisoryLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var held bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_advisory_unlock($1)`, l.key).Scan(&held); err != nil {
		return fmt.Errorf("pg_advisory_unlock: %w", err)
	}
	if !held {
		return errors.New("pg_advisory_unlock: lock was not held")
	}
	return nil
}

// discard closes conn's underlying connection, ending its session (and any
// advisory lock it holds), so that database/sql and pgxpool drop it.
func discard(conn *sql.Conn) error {
	err := conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Conn().Close(ctx)
	})
	return errors.Join(err, conn.Close())
}
