//go:build unix

package worker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/gyrehq/gyre/flywheel"
)

// ArtifactLimits are the caps of SPEC §5. Zero fields take the defaults.
type ArtifactLimits struct {
	// InlineFile is the largest UTF-8 file inlined (default 64 KiB).
	InlineFile int64
	// InlineTotal caps the inlined bytes of one report (default 1 MiB).
	InlineTotal int64
	// TooLarge is the size above which a file is not even hashed but
	// reported skipped:too_large:<bytes> (default 1 GiB).
	TooLarge int64
	// MaxFiles caps the entries reported (default 10000); the rest are
	// left out with an event saying so.
	MaxFiles int
	// MaxDepth caps directory nesting (default 64).
	MaxDepth int
}

func (l ArtifactLimits) withDefaults() ArtifactLimits {
	if l.InlineFile == 0 {
		l.InlineFile = 64 << 10
	}
	if l.InlineTotal == 0 {
		l.InlineTotal = 1 << 20
	}
	if l.TooLarge == 0 {
		l.TooLarge = 1 << 30
	}
	if l.MaxFiles == 0 {
		l.MaxFiles = 10000
	}
	if l.MaxDepth == 0 {
		l.MaxDepth = 64
	}
	return l
}

// Skip markers, matching ^skipped:[a-z_]+(:[0-9]+)?$.
const (
	skipSymlink    = "skipped:symlink"
	skipNotRegular = "skipped:not_regular"
	skipChanged    = "skipped:changed"
	skipUnreadable = "skipped:unreadable"
)

// nonblock keeps an open from hanging on a FIFO swapped in for a file.
const nonblock = syscall.O_NONBLOCK

// collector walks one artifacts directory.
type collector struct {
	lim       ArtifactLimits
	out       map[string]flywheel.Artifact
	events    []json.RawMessage
	inlined   int64
	truncated bool
}

// CollectArtifacts reports every regular file under rel, a relative path
// inside the directory root, by its slash-separated name relative to rel
// (SPEC §5). It opens everything through os.Root and never follows a
// symlink, not even one pointing inside (reported skipped:symlink). Small
// UTF-8 files are inlined within the per-report budget; other files keep
// their SHA-256; files over the size cap are skipped:too_large:<bytes>.
// Problems are reported as events, never as an error: a rollout's output
// is submitted whatever its artifacts look like.
func CollectArtifacts(root, rel string, lim ArtifactLimits) (map[string]flywheel.Artifact, []json.RawMessage) {
	c := &collector{lim: lim.withDefaults(), out: map[string]flywheel.Artifact{}}
	dir, err := openDirNoFollow(root, rel)
	if err != nil {
		c.event("artifacts_unreadable", "message", err.Error())
		return nil, c.events
	}
	defer dir.Close()
	c.walk(dir, "", 0)
	if c.truncated {
		c.event("artifacts_truncated", "message",
			fmt.Sprintf("only the first %d entries of the artifacts directory are reported", c.lim.MaxFiles))
	}
	if len(c.out) == 0 {
		return nil, c.events
	}
	return c.out, c.events
}

// openDirNoFollow opens rel under base one component at a time, refusing
// any component that is a symlink or was swapped while opening.
func openDirNoFollow(base, rel string) (*os.Root, error) {
	r, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	rel = filepath.ToSlash(filepath.Clean(rel))
	if rel == "." {
		return r, nil
	}
	for _, part := range strings.Split(rel, "/") {
		sub, err := openSubdir(r, part)
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", rel, err)
		}
		r = sub
	}
	return r, nil
}

var errSymlink = errors.New("is a symlink")

// openSubdir opens the directory name inside r without following a
// symlink.
func openSubdir(r *os.Root, name string) (*os.Root, error) {
	fi, err := r.Lstat(name)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s %w", name, errSymlink)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", name)
	}
	sub, err := r.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	st, err := sub.Stat(".")
	if err != nil || !os.SameFile(fi, st) {
		sub.Close()
		return nil, fmt.Errorf("%s changed while it was opened", name)
	}
	return sub, nil
}

func (c *collector) add(name string, a flywheel.Artifact) bool {
	if len(c.out) >= c.lim.MaxFiles {
		c.truncated = true
		return false
	}
	c.out[name] = a
	return true
}

func (c *collector) event(typ string, kv ...any) {
	c.events = append(c.events, event(typ, kv...))
}

// walk reports the entries of dir, in name order, under prefix.
func (c *collector) walk(dir *os.Root, prefix string, depth int) {
	f, err := dir.Open(".")
	if err != nil {
		c.event("artifacts_unreadable", "path", prefix, "message", err.Error())
		return
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		c.event("artifacts_unreadable", "path", prefix, "message", err.Error())
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if c.truncated {
			return
		}
		name := prefix + e.Name()
		if !utf8.ValidString(name) {
			c.event("artifact_skipped", "path", strings.ToValidUTF8(name, "\uFFFD"),
				"message", "the file name is not valid UTF-8, which JSON cannot carry")
			continue
		}
		switch t := e.Type(); {
		case t&fs.ModeSymlink != 0:
			c.add(name, flywheel.DigestArtifact(skipSymlink))
		case t.IsDir():
			if depth+1 >= c.lim.MaxDepth {
				c.event("artifact_skipped", "path", name, "message", "directory nested too deep")
				continue
			}
			sub, err := openSubdir(dir, e.Name())
			if errors.Is(err, errSymlink) {
				c.add(name, flywheel.DigestArtifact(skipSymlink))
				continue
			}
			if err != nil {
				c.event("artifacts_unreadable", "path", name, "message", err.Error())
				continue
			}
			c.walk(sub, name+"/", depth+1)
			sub.Close()
		case t.IsRegular():
			c.add(name, c.file(dir, e.Name()))
		default:
			c.add(name, flywheel.DigestArtifact(skipNotRegular))
		}
	}
}

// file reports one regular file.
func (c *collector) file(dir *os.Root, name string) flywheel.Artifact {
	fi, err := dir.Lstat(name)
	switch {
	case err != nil:
		return flywheel.DigestArtifact(skipUnreadable)
	case fi.Mode()&fs.ModeSymlink != 0:
		return flywheel.DigestArtifact(skipSymlink)
	case !fi.Mode().IsRegular():
		return flywheel.DigestArtifact(skipNotRegular)
	case fi.Size() > c.lim.TooLarge:
		return flywheel.DigestArtifact("skipped:too_large:" + strconv.FormatInt(fi.Size(), 10))
	}
	// O_NONBLOCK: should the file be swapped for a FIFO, opening it does
	// not hang; the identity check below then refuses it.
	f, err := dir.OpenFile(name, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return flywheel.DigestArtifact(skipUnreadable)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !os.SameFile(fi, st) || !st.Mode().IsRegular() {
		return flywheel.DigestArtifact(skipChanged)
	}
	h := sha256.New()
	var head []byte
	var n int64
	if st.Size() <= c.lim.InlineFile {
		head, err = io.ReadAll(io.LimitReader(f, c.lim.InlineFile+1))
		if err != nil {
			return flywheel.DigestArtifact(skipUnreadable)
		}
		h.Write(head)
		n = int64(len(head))
	}
	rest, err := io.Copy(h, io.LimitReader(f, c.lim.TooLarge+1-n))
	if err != nil {
		return flywheel.DigestArtifact(skipUnreadable)
	}
	n += rest
	if n > c.lim.TooLarge {
		return flywheel.DigestArtifact("skipped:too_large:" + strconv.FormatInt(n, 10))
	}
	if rest == 0 && n <= c.lim.InlineFile && utf8.Valid(head) && bytes.IndexByte(head, 0) < 0 && c.inlined+n <= c.lim.InlineTotal {
		c.inlined += n
		return flywheel.InlineArtifactOf(string(head))
	}
	return flywheel.DigestArtifact(hex.EncodeToString(h.Sum(nil)))
}
