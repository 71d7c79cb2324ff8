package flywheel_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

func TestStableWorkerID(t *testing.T) {
	t.Parallel()
	root := filepath.Join(t.TempDir(), "worker")
	a, err := flywheel.StableWorkerID(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := flywheel.StableWorkerID(root)
	if err != nil || a != b {
		t.Errorf("restart: %q then %q (%v), want the same id", a, b, err)
	}
	other, _ := flywheel.StableWorkerID(t.TempDir())
	if other == a {
		t.Errorf("two roots share the id %q", a)
	}
	if fi, err := os.Stat(filepath.Join(root, "worker-id")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("worker-id file: %v %v", fi, err)
	}
}

func TestNewTurnID_IsAValidTurnID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		id := flywheel.NewTurnID()
		if err := flywheel.ValidateTurnID(id); err != nil || seen[id] {
			t.Fatalf("NewTurnID = %q: %v (repeated %t)", id, err, seen[id])
		}
		seen[id] = true
	}
}
