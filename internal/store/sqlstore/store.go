package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// Config is what an engine package hands to New.
type Config struct {
	// Dialect describes the engine. Required.
	Dialect Dialect
	// Writer runs every write transaction. Required. On SQLite it holds a
	// single connection whose transactions begin IMMEDIATE.
	Writer *sql.DB
	// Reader serves reads. Defaults to Writer (PostgreSQL uses one pool).
	Reader *sql.DB
	// Clock stamps every stored time. Defaults to the wall clock.
	Clock clock.Clock
	// DatabaseClock makes lease and deadline decisions read the
	// database's clock (Dialect.NowExpr) instead of Clock, so that
	// several replicas share one clock (SPEC §4.5: PostgreSQL's now()).
	DatabaseClock bool
	// Logger receives the store's diagnostics. Defaults to discarding them.
	Logger *slog.Logger
	// MigrationLock serialises Migrate across processes. Required.
	MigrationLock Locker
	// LockNamespace separates the keys of Dialect.TxLock between stores
	// sharing one server (a PostgreSQL schema name); may be empty.
	LockNamespace string
	// OnClose, if set, runs after Writer and Reader are closed, to release
	// what they were built on (a pgxpool).
	OnClose func() error
}

// Store implements store.Store over database/sql.
type Store struct {
	d       Dialect
	writer  *sql.DB
	reader  *sql.DB
	clock   clock.Clock
	log     *slog.Logger
	migrate Locker
	lockNS  string
	dbClock bool
	group   *groupWriter
	claims  *claimCombiner
	onClose func() error
}

var _ store.Store = (*Store)(nil)

// New returns a Store over the given handles. It does no I/O: engine
// packages migrate or check the schema before calling it.
func New(cfg Config) (*Store, error) {
	if cfg.Writer == nil {
		return nil, errors.New("sqlstore: no writer")
	}
	if cfg.MigrationLock == nil {
		return nil, errors.New("sqlstore: no migration locker")
	}
	if cfg.Dialect.Engine == "" || cfg.Dialect.Migrations == nil || cfg.Dialect.IsUniqueViolation == nil {
		return nil, errors.New("sqlstore: incomplete dialect")
	}
	s := &Store{
		d:       cfg.Dialect,
		writer:  cfg.Writer,
		reader:  cfg.Reader,
		clock:   cfg.Clock,
		log:     cfg.Logger,
		migrate: cfg.MigrationLock,
		lockNS:  cfg.LockNamespace,
		dbClock: cfg.DatabaseClock && cfg.Dialect.NowExpr != "",
		onClose: cfg.OnClose,
	}
	if s.reader == nil {
		s.reader = s.writer
	}
	if cfg.Dialect.OneStatementClaim {
		s.claims = newClaimCombiner()
	}
	if cfg.Dialect.GroupCommit {
		s.group = newGroupWriter(s.writer)
	}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// Engine names the backend: "sqlite" or "postgres".
func (s *Store) Engine() string { return s.d.Engine }

// Ping checks that the database answers and is migrated exactly to the
// version this gyre knows; it backs /readyz.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.reader.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s: %w", s.d.Engine, err)
	}
	if err := CheckSchema(ctx, s.reader, s.d); err != nil {
		return fmt.Errorf("ping %s: %w", s.d.Engine, err)
	}
	return nil
}

// Migrate brings the schema up to date under the engine's cross-process
// lock (see the package-level Migrate). Running it again is a no-op.
func (s *Store) Migrate(ctx context.Context) error {
	return Migrate(ctx, s.writer, s.d, s.migrate, s.log)
}

// SchemaVersion returns the migration version the database is at.
func (s *Store) SchemaVersion(ctx context.Context) (int64, error) {
	return SchemaVersion(ctx, s.reader, s.d)
}

// Close closes the reader, then the writer (on SQLite the last connection
// to close checkpoints the WAL), then whatever OnClose releases.
func (s *Store) Close() error {
	var errs []error
	if s.group != nil {
		s.group.close()
	}
	if s.reader != s.writer {
		errs = append(errs, s.reader.Close())
	}
	errs = append(errs, s.writer.Close())
	if s.onClose != nil {
		errs = append(errs, s.onClose())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close %s store: %w", s.d.Engine, err)
	}
	return nil
}

// now is the current time in the stored representation.
func (s *Store) now() int64 { return store.Micros(s.clock.Now()) }

// leaseNow is the time lease and deadline decisions use: the database's
// clock when the store is configured for it, else the injected clock.
func (s *Store) leaseNow(ctx context.Context, q querier) (int64, error) {
	if !s.dbClock {
		return s.now(), nil
	}
	var us int64
	if err := q.QueryRowContext(ctx, "SELECT "+s.d.NowExpr).Scan(&us); err != nil {
		return 0, fmt.Errorf("read database clock: %w", err)
	}
	return us, nil
}

// lockKey derives the int64 key of a named lock in this store's namespace.
func (s *Store) lockKey(name string) int64 { return LockKey(s.lockNS, name) }

// LockKey derives the int64 key of the lock called name among the stores
// of namespace (on PostgreSQL: advisory lock keys, which are per database,
// so stores in different schemas of one database do not share locks).
func LockKey(namespace, name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("gyre\x00" + namespace + "\x00" + name))
	return int64(h.Sum64())
}
