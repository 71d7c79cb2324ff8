package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre/internal/store"
)

// maxWriteAttempts bounds how often write runs a transaction that failed
// with a retryable error (PostgreSQL serialization failure or deadlock).
const maxWriteAttempts = 5

// querier is what *sql.DB and *sql.Tx have in common, so that one query
// function serves both reads on the reader pool and reads inside a write.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// write runs fn in one write transaction and commits it. On SQLite the
// transaction begins IMMEDIATE on the single writer connection, so it holds
// the database's write lock from its first statement and never fails to
// upgrade a read lock. On PostgreSQL a serialization failure or deadlock
// reruns fn from the start, so fn must have no effect outside tx (minting
// ids is fine) and must not keep results from an earlier attempt.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.group != nil {
		return s.group.write(ctx, fn)
	}
	for attempt := 1; ; attempt++ {
		err := s.writeOnce(ctx, fn)
		if err == nil || s.d.IsRetryable == nil || !s.d.IsRetryable(err) || attempt == maxWriteAttempts {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		s.log.LogAttrs(ctx, slog.LevelDebug, "retrying write transaction",
			slog.Int("attempt", attempt), slog.String("error", err.Error()))
	}
}

func (s *Store) writeOnce(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback() // also on panic; the error of fn is what matters
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	done = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// lockTx takes the named transaction-level lock (pg_advisory_xact_lock),
// released when tx ends. On SQLite it does nothing: a write transaction
// already excludes every other writer, in this process and in others.
func (s *Store) lockTx(ctx context.Context, tx *sql.Tx, name string) error {
	if s.d.TxLock == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.d.TxLock, s.lockKey(name)); err != nil {
		return fmt.Errorf("lock %s: %w", name, err)
	}
	return nil
}

// newID mints a gyre id: a UUIDv7 string, time-ordered so that id order is
// creation order within a process.
func newID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("mint id: %w", err)
	}
	return id.String(), nil
}

// notFound maps sql.ErrNoRows to store.ErrNotFound and wraps anything else.
func notFound(what string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}
