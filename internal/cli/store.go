package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// logger returns the logger of a command, writing to stderr at the
// configured level.
func (a *app) logger(c Config) *slog.Logger {
	level, err := telemetry.ParseLevel(c.LogLevel)
	if err != nil {
		level = slog.LevelInfo // Validate has refused this already
	}
	return telemetry.NewLogger(a.stderr, level, telemetry.LogAuto)
}

// storeOptions are the storeopen options for c.
func storeOptions(c Config, log *slog.Logger, migrate bool) storeopen.Options {
	return storeopen.Options{DB: c.DB, DataDir: c.Data, Clock: clock.Real{}, Logger: log, Migrate: migrate}
}

// openStore opens (and migrates) the store c names. storeopen creates a
// SQLite data directory, private to its owner, when it does not exist.
func openStore(ctx context.Context, c Config, log *slog.Logger) (store.Store, error) {
	st, err := storeopen.Open(ctx, storeOptions(c, log, true))
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return st, nil
}
