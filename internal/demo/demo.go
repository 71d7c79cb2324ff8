// Package demo holds what gyre demo runs. The flywheel stages (loop.go)
// drive a running gyre serve through gyre's own commands (the Gyre
// interface, which package cli implements in-process): production turns of
// the example agent, tasks from them and from the agent suite
// (agentsuite/suite.yaml), a batch run by gyre worker, its training-grade
// yield, an sft export and a promotion; summary.go holds their figures and
// blocks. The scripted demo model they run against is package scripted.
// The evaluator stage uses an embedded suite of support-desk cases and the
// example support-desk harness (examples/harness/desk) served in-process
// on a loopback port with its offline, deterministic rules; the experiment
// runs through the same code as gyre eval run (package cli wires it).
package demo

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/gyrehq/gyre/examples/harness/desk"
	"github.com/gyrehq/gyre/harnesskit"
)

// SuiteName is the name of the embedded suite.
const SuiteName = "support-desk-demo"

// ExpectedFailures are the cases of the embedded suite the rule-based desk
// fails on purpose, so the demo shows a failure and a pass rate below 1.
var ExpectedFailures = []string{"no-refund-wanted"}

//go:embed suite
var suiteFS embed.FS

// Suite returns the embedded suite as a file system: suite.yaml and
// fixtures/.
func Suite() fs.FS {
	sub, err := fs.Sub(suiteFS, "suite")
	if err != nil {
		panic(err) // the embedded directory exists
	}
	return sub
}

// WriteSuite writes the embedded suite into dir (created if needed),
// replacing the files it wrote before, and returns dir, which suite.Load
// reads as a suite directory.
func WriteSuite(dir string) (string, error) {
	src := Suite()
	err := fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		return writeFile(dst, b)
	})
	if err != nil {
		return "", fmt.Errorf("write the demo suite: %w", err)
	}
	return dir, nil
}

// writeFile replaces name with b through a temporary file and a rename, so
// a reader never sees half a file.
func writeFile(name string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+path.Base(filepath.ToSlash(name))+".*")
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// Harness is the example support desk served on a loopback port.
type Harness struct {
	// URL is the harness's base URL, http://127.0.0.1:<port>.
	URL  string
	kit  *harnesskit.Server
	srv  *http.Server
	done chan struct{}
}

// StartHarness serves the example desk with its rule-based policy (no
// model, no network) on 127.0.0.1 at a free port, with per-run workspaces
// under workspaceDir (empty: the system temp dir). log receives the kit's
// logs (nil: discarded). Call Close when done.
func StartHarness(log *slog.Logger, workspaceDir string) (*Harness, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kit, err := desk.New(desk.Config{Logger: log, WorkspaceDir: workspaceDir})
	if err != nil {
		return nil, fmt.Errorf("demo harness: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = kit.Close()
		return nil, fmt.Errorf("demo harness: listen: %w", err)
	}
	h := &Harness{
		URL: "http://" + ln.Addr().String(),
		kit: kit,
		srv: &http.Server{
			Handler:           kit,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("demo harness stopped", slog.String("error", err.Error()))
		}
	}()
	return h, nil
}

// Close stops the listener (waiting for open requests until ctx ends),
// then cancels the runs still going and removes their workspaces.
func (h *Harness) Close(ctx context.Context) error {
	err := h.srv.Shutdown(ctx)
	<-h.done
	return errors.Join(err, h.kit.Close())
}
