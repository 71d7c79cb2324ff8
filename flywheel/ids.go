package flywheel

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// NewTurnID returns a fresh turn id (a UUIDv7 string), valid under the
// contract's turn_id grammar. Attach mints one for every turn captured
// without an id, once, so that a retried batch repeats the same ids and the
// server counts it as a duplicate rather than a new turn.
func NewTurnID() string { return newID() }

func newID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

// workerIDFile holds a worker's random id under its root.
const workerIDFile = "worker-id"

var workerIDRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// StableWorkerID returns an id for the worker that owns root, stable
// across restarts: the host name and a random suffix kept in
// <root>/worker-id (created on first use, mode 0600).
func StableWorkerID(root string) (string, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		return "", fmt.Errorf("flywheel: worker id: %w", err)
	}
	path := filepath.Join(root, workerIDFile)
	b, err := os.ReadFile(path)
	if err == nil && workerIDRE.Match([]byte(strings.TrimSpace(string(b)))) {
		return host + "-" + strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("flywheel: worker id: %w", err)
	}
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("flywheel: worker id: %w", err)
	}
	id := hex.EncodeToString(r[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another worker on the same root won the race; use its id.
		if b, err := os.ReadFile(path); err == nil && workerIDRE.Match([]byte(strings.TrimSpace(string(b)))) {
			return host + "-" + strings.TrimSpace(string(b)), nil
		}
		return "", fmt.Errorf("flywheel: worker id: %s holds no valid id", path)
	}
	if err != nil {
		return "", fmt.Errorf("flywheel: worker id: %w", err)
	}
	if _, err := f.WriteString(id + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("flywheel: worker id: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("flywheel: worker id: %w", err)
	}
	return host + "-" + id, nil
}
