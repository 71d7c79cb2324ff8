package harnesskit

import (
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"os"
	"path"
	"strings"
	"sync"
)

// workspace is one run's directory, created on first use under the
// server's WorkspaceDir and accessed only through an *os.Root, so that no
// path, symlink included, reaches outside it.
type workspace struct {
	parent string

	mu     sync.Mutex
	dir    string
	r      *os.Root
	closed bool
}

var errWorkspaceClosed = errors.New("harnesskit: the run's workspace was removed")

// root returns the workspace root, creating the directory when create is
// set; without create it returns nil, nil while none exists.
func (w *workspace) root(create bool) (*os.Root, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errWorkspaceClosed
	}
	if w.r != nil || !create {
		return w.r, nil
	}
	dir, err := os.MkdirTemp(w.parent, "harnesskit-run-")
	if err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("open workspace: %w", err)
	}
	w.dir, w.r = dir, r
	return r, nil
}

// writeFile writes data at the workspace-relative path name.
func (w *workspace) writeFile(name string, data []byte) error {
	if !validWorkspacePath(name) {
		return fmt.Errorf("harnesskit: workspace path %q is not a slash-separated relative path without \"..\"", name)
	}
	r, err := w.root(true)
	if err != nil {
		return err
	}
	if dir := path.Dir(name); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create workspace directory: %w", err)
		}
	}
	if err := r.WriteFile(name, data, 0o644); err != nil {
		return fmt.Errorf("write workspace file: %w", err)
	}
	return nil
}

// list returns the workspace's regular files, in lexical path order.
// Symlinks and other special files are left out.
func (w *workspace) list() ([]FileEntry, error) {
	r, err := w.root(false)
	if err != nil || r == nil {
		return nil, err
	}
	var out []FileEntry
	err = fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := FileEntry{Path: p, Size: info.Size()}
		if ct := contentType(p); ct != "" {
			e.ContentType = &ct
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list workspace: %w", err)
	}
	return out, nil
}

// open opens the regular file at the workspace-relative path name; a
// missing file, a directory or a special file is fs.ErrNotExist.
func (w *workspace) open(name string) (*os.File, fs.FileInfo, error) {
	r, err := w.root(false)
	if err != nil {
		return nil, nil, err
	}
	if r == nil {
		return nil, nil, fs.ErrNotExist
	}
	// Lstat first: a symlink is not served even when it stays inside.
	info, err := r.Lstat(name)
	if err != nil {
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, nil, fs.ErrNotExist
	}
	f, err := r.Open(name)
	if err != nil {
		return nil, nil, err
	}
	return f, info, nil
}

// remove deletes the workspace directory; later calls fail.
func (w *workspace) remove() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.r == nil {
		return nil
	}
	_ = w.r.Close()
	w.r = nil
	if err := os.RemoveAll(w.dir); err != nil {
		return fmt.Errorf("remove workspace: %w", err)
	}
	return nil
}

// validWorkspacePath reports whether p is a workspace-relative path: slash
// separated, not empty, no empty, "." or ".." element, no leading or
// trailing slash, no backslash or NUL.
func validWorkspacePath(p string) bool {
	return p != "." && fs.ValidPath(p) && !strings.ContainsAny(p, "\\\x00")
}

// contentType guesses a file's media type from its extension.
func contentType(p string) string {
	return mime.TypeByExtension(path.Ext(p))
}
