package telemetry

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/mattn/go-isatty"
)

// LogFormat chooses how log records are written.
type LogFormat string

// The log formats. LogAuto picks JSON unless the output is a terminal.
const (
	LogAuto LogFormat = "auto"
	LogJSON LogFormat = "json"
	LogText LogFormat = "text"
)

// ParseLevel parses a log level name: debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q: want debug, info, warn or error", s)
}

// NewLogger returns a logger that writes records at level and above to w,
// as text when format is LogText or when format is LogAuto and w is a
// terminal, and as JSON otherwise.
func NewLogger(w io.Writer, level slog.Leveler, format LogFormat) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == LogText || (format == LogAuto && isTerminal(w)) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// Discard is a logger that drops every record, for callers that have none.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
