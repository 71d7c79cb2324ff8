package blobstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/gcerrors"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrNotFound means no object exists at the key.
	ErrNotFound = errors.New("blob not found")
	// ErrInvalidKey means a key or prefix breaks the rules of ValidateKey.
	ErrInvalidKey = errors.New("invalid blob key")
	// ErrDigestMismatch means an object's bytes do not hash to the expected
	// SHA-256.
	ErrDigestMismatch = errors.New("blob sha-256 mismatch")
	// ErrTooLarge means a body exceeded PutOptions.MaxSize; nothing was
	// stored.
	ErrTooLarge = errors.New("blob too large")
)

// DefaultContentType is stored when a Put names no content type. Bodies
// are never sniffed, so a stored blob is never served as HTML by accident.
const DefaultContentType = "application/octet-stream"

// openTimeout bounds the reachability check Open makes.
const openTimeout = 15 * time.Second

// Upload tuning for S3. The AWS transfer manager buffers the first
// multipartThreshold bytes to choose between one PutObject and a multipart
// upload; a longer body then goes up in parts of partSize bytes, at most
// partConcurrency at a time. One streaming upload so holds at most about
// multipartThreshold + partSize*partConcurrency bytes of memory, whatever
// the body's length. 5 MiB is S3's smallest part.
const (
	multipartThreshold = 16 << 20 // the transfer manager's fixed default
	partSize           = 5 << 20
	partConcurrency    = 2
)

// Store is a blob bucket. It is safe for concurrent use.
type Store struct {
	bucket *blob.Bucket
	// base is prepended to a key to form its URL: "s3://bucket/<prefix>"
	// or "file:///dir/<prefix>".
	base string
	// scheme is "file" or "s3".
	scheme string
	// dir is, for the file backend, the directory that holds the keys
	// (the bucket directory joined with the prefix).
	dir string
}

// Object describes a stored object.
type Object struct {
	// Key is the object's key, without the store's prefix.
	Key string
	// Size is the length in bytes.
	Size int64
	// ContentType is as stored by Put; empty in List results.
	ContentType string
	// ModTime is when the object was last written.
	ModTime time.Time
	// ETag is the service's entity tag; empty in List results.
	ETag string
}

// PutOptions tune a Put. The zero value is ready to use.
type PutOptions struct {
	// ContentType is stored with the object; DefaultContentType when empty.
	ContentType string
	// MaxSize, when positive, is the largest body accepted: a longer body
	// stores nothing and fails with ErrTooLarge.
	MaxSize int64
}

// Open opens the bucket at rawURL (see the package documentation for the
// URL forms). An empty rawURL means file://<dataDir>/blobs, created with
// mode 0700. Open checks that the bucket is reachable, waiting at most 15
// seconds.
func Open(ctx context.Context, rawURL, dataDir string) (*Store, error) {
	if rawURL == "" {
		if dataDir == "" {
			return nil, errors.New("open blob store: no url and no data dir")
		}
		abs, err := filepath.Abs(filepath.Join(dataDir, "blobs"))
		if err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
		rawURL = (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	q := u.Query()
	for k, v := range q {
		if len(v) != 1 {
			return nil, fmt.Errorf("open blob store: parameter %q given %d times", k, len(v))
		}
	}
	prefix := q.Get("prefix")
	q.Del("prefix")
	if prefix != "" {
		if err := checkSegments(strings.TrimSuffix(prefix, "/")); err != nil {
			return nil, fmt.Errorf("open blob store: prefix: %w", err)
		}
		prefix = strings.TrimSuffix(prefix, "/") + "/"
	}

	s := &Store{scheme: u.Scheme}
	switch u.Scheme {
	case "file":
		dir, err := fileDir(u, q)
		if err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
		s.bucket, err = fileblob.OpenBucket(dir, &fileblob.Options{
			DirFileMode: 0o700,
			// Stage writes next to their object rather than in os.TempDir,
			// which may be on another file system.
			NoTempDir: true,
		})
		if err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
		s.base = (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir) + "/"}).String()
		s.dir = filepath.Join(dir, filepath.FromSlash(prefix))
	case "s3":
		s.bucket, err = openS3(ctx, u, q)
		if err != nil {
			return nil, fmt.Errorf("open blob store: %w", err)
		}
		s.base = "s3://" + u.Host + "/"
	default:
		return nil, fmt.Errorf("open blob store: unsupported scheme %q (want file or s3)", u.Scheme)
	}
	if prefix != "" {
		s.bucket = blob.PrefixedBucket(s.bucket, prefix)
		s.base += prefix
	}

	pctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	if err := s.Ping(pctx); err != nil {
		_ = s.bucket.Close()
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	return s, nil
}

// fileDir returns the absolute directory of a file URL, which takes no
// query parameters but prefix.
func fileDir(u *url.URL, q url.Values) (string, error) {
	for k := range q {
		return "", fmt.Errorf("file url: unknown parameter %q", k)
	}
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("file url: host %q not allowed (want file:///absolute/path)", u.Host)
	}
	if u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
		return "", errors.New("file url: path must be absolute (want file:///absolute/path)")
	}
	dir := filepath.Clean(filepath.FromSlash(u.Path))
	if dir == string(filepath.Separator) {
		return "", errors.New("file url: refusing the root directory")
	}
	return dir, nil
}

// Close releases the bucket.
func (s *Store) Close() error {
	if err := s.bucket.Close(); err != nil {
		return fmt.Errorf("close blob store: %w", err)
	}
	return nil
}

// Ping checks that the bucket exists and answers.
func (s *Store) Ping(ctx context.Context) error {
	ok, err := s.bucket.IsAccessible(ctx)
	if err != nil {
		return fmt.Errorf("blob store unreachable: %w", err)
	}
	if !ok {
		return errors.New("blob bucket does not exist")
	}
	return nil
}

// URL returns the blob-store URL of the object at key, such as
// s3://bucket/prefix/key or file:///data/blobs/key, for harnesses that read
// the store themselves. It does not check that the object exists.
func (s *Store) URL(key string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	return s.base + key, nil
}

// Put stores the body read from r at key, streaming it (an S3 upload holds
// at most about 26 MiB at a time whatever the length), and returns its
// length. The object appears whole or not at all: a read error, a
// cancelled ctx or a body over opts.MaxSize stores nothing and leaves an
// existing object unchanged, and a reader of the key during an overwrite
// sees the old object or the new one. opts may be nil.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts *PutOptions) (int64, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	return s.put(ctx, key, r, opts)
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, opts *PutOptions) (int64, error) {
	if s.scheme != "file" {
		n, err := s.upload(ctx, key, r, opts)
		if err != nil {
			return n, fmt.Errorf("put %s: %w", key, err)
		}
		return n, nil
	}
	// The file backend rewrites an object's attribute sidecar in place as
	// it commits, so a reader of the key could find it empty. Write to a
	// staging key no one reads, then publish with renames.
	tmp := newTmpKey()
	n, err := s.upload(ctx, tmp, r, opts)
	if err != nil {
		return n, fmt.Errorf("put %s: %w", key, err)
	}
	if err := s.publishFile(tmp, key, true); err != nil {
		s.deleteTmp(ctx, tmp)
		return n, fmt.Errorf("put %s: %w", key, err)
	}
	return n, nil
}

// upload writes the body read from r to key in the bucket itself (on the
// file backend, fileblob's own temporary file and rename) and returns its
// length. A failed body's own error explains the failure.
func (s *Store) upload(ctx context.Context, key string, r io.Reader, opts *PutOptions) (int64, error) {
	if opts == nil {
		opts = &PutOptions{}
	}
	ct := opts.ContentType
	if ct == "" {
		ct = DefaultContentType
	}
	// The write runs on a context of its own so that a failed S3 multipart
	// upload can still be aborted after ctx ends: the body reader fails as
	// soon as ctx is done, which makes the transfer manager abort the
	// upload, and the write context follows ctx only after abortGrace.
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer wcancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(abortGrace, wcancel) })
	defer stop()
	body := &guardedReader{ctx: ctx, r: r, max: opts.MaxSize}
	if s.scheme == "file" {
		// The file backend commits whatever it got unless its context is
		// cancelled before it closes.
		body.onErr = wcancel
	}
	err := s.bucket.Upload(wctx, key, body, &blob.WriterOptions{
		ContentType:                 ct,
		DisableContentTypeDetection: true,
		BufferSize:                  partSize,
		MaxConcurrency:              partConcurrency,
	})
	if body.err != nil {
		// The body's own failure explains the write's.
		return body.n, body.err
	}
	if err != nil {
		return body.n, mapErr(err)
	}
	return body.n, nil
}

// newTmpKey returns a fresh staging key under tmpDir.
func newTmpKey() string { return tmpDir + "/" + rand.Text() }

// deleteTmp removes the staging object tmp, if any, on a context that
// survives the caller's cancellation. A failure only leaves work for
// SweepTemp.
func (s *Store) deleteTmp(ctx context.Context, tmp string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), openTimeout)
	defer cancel()
	_ = s.bucket.Delete(dctx, tmp)
}

// attrsSuffix names fileblob's attribute sidecar: the object's path plus
// this suffix, a JSON file with its content type and MD5.
const attrsSuffix = ".attrs"

// publishFile moves the file backend's staged object at tmp to key. With
// replace false, an object already at key is kept and tmp left in place.
//
// fileblob commits a write by truncating and rewriting the sidecar
// key.attrs and then renaming the data file into place, so a reader that
// opens the sidecar of an existing object meanwhile reads it empty and
// fails with io.EOF. Here both files arrive by rename instead, which
// replaces its target atomically: a reader sees each file old or new,
// whole. The sidecar goes first, so the data file never appears without
// one. Two publishers of the same key may interleave their renames; for
// content-addressed keys they carry identical files. Should the data
// rename alone fail, the new sidecar stays beside the old data until the
// key is next written.
func (s *Store) publishFile(tmp, key string, replace bool) error {
	src := filepath.Join(s.dir, filepath.FromSlash(tmp))
	dst := filepath.Join(s.dir, filepath.FromSlash(key))
	fi, err := os.Lstat(dst)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("%s is a directory", key)
	case err == nil && !replace:
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	if err := os.Rename(src+attrsSuffix, dst+attrsSuffix); err != nil {
		return err
	}
	return os.Rename(src, dst)
}

// abortGrace is how long an S3 upload may go on after its caller's context
// ended, to abort cleanly instead of leaving parts behind.
const abortGrace = 30 * time.Second

// guardedReader passes a body through, counting it, and fails it when ctx
// ends or it grows past max (when positive). It records the first failure
// and calls onErr, if set, before returning it.
type guardedReader struct {
	ctx   context.Context
	r     io.Reader
	max   int64
	n     int64
	err   error
	onErr func()
}

func (g *guardedReader) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if err := g.ctx.Err(); err != nil {
		return 0, g.fail(err)
	}
	if g.max > 0 && int64(len(p)) > g.max-g.n+1 {
		p = p[:g.max-g.n+1]
	}
	n, err := g.r.Read(p)
	g.n += int64(n)
	if g.max > 0 && g.n > g.max {
		return 0, g.fail(fmt.Errorf("%w: over %d bytes", ErrTooLarge, g.max))
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return n, g.fail(err)
	}
	return n, err
}

// WriteTo copies the body to w through a pooled buffer. Without it the
// file backend's Writer.ReadFrom allocates a fresh 1 MiB buffer for every
// upload, which for the gateway's many small message and request blobs
// costs more than writing them (and the garbage collector's time after).
func (g *guardedReader) WriteTo(w io.Writer) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var n int64
	for {
		nr, rerr := g.Read(buf)
		if nr > 0 {
			nw, werr := w.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if nw != nr {
				return n, io.ErrShortWrite
			}
		}
		if errors.Is(rerr, io.EOF) {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// copyBufs holds the buffers WriteTo copies through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func (g *guardedReader) fail(err error) error {
	g.err = err
	if g.onErr != nil {
		g.onErr()
	}
	return err
}

// Get opens the object at key for reading; the caller closes it. A missing
// object is ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	r, err := s.bucket.NewReader(ctx, key, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, mapErr(err))
	}
	return r, nil
}

// Stat describes the object at key. A missing object is ErrNotFound.
func (s *Store) Stat(ctx context.Context, key string) (Object, error) {
	if err := ValidateKey(key); err != nil {
		return Object{}, err
	}
	a, err := s.bucket.Attributes(ctx, key)
	if err != nil {
		return Object{}, fmt.Errorf("stat %s: %w", key, mapErr(err))
	}
	return Object{Key: key, Size: a.Size, ContentType: a.ContentType, ModTime: a.ModTime, ETag: a.ETag}, nil
}

// Exists reports whether an object exists at key.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	if err := ValidateKey(key); err != nil {
		return false, err
	}
	ok, err := s.bucket.Exists(ctx, key)
	if err != nil {
		return false, fmt.Errorf("exists %s: %w", key, mapErr(err))
	}
	return ok, nil
}

// Delete removes the object at key. A missing object is ErrNotFound, which
// callers that only want it gone may ignore.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := s.bucket.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete %s: %w", key, mapErr(err))
	}
	return nil
}

// List yields every object whose key starts with prefix, in key order,
// recursively (no directory grouping). An empty prefix lists the whole
// store. Staging objects are never listed. The sequence stops after
// yielding an error.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		if err := validatePrefix(prefix); err != nil {
			yield(Object{}, err)
			return
		}
		for o, err := range s.listRaw(ctx, prefix) {
			if err != nil {
				yield(Object{}, err)
				return
			}
			// Skip what is not a caller's object: staging uploads, and
			// the file backend's in-flight or stranded temporary files.
			if ValidateKey(o.Key) != nil {
				continue
			}
			if !yield(o, nil) {
				return
			}
		}
	}
}

// listRaw lists every object under prefix, valid key or not.
func (s *Store) listRaw(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
		for {
			lo, err := it.Next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(Object{}, fmt.Errorf("list %q: %w", prefix, mapErr(err)))
				return
			}
			if lo.IsDir {
				continue
			}
			if !yield(Object{Key: lo.Key, Size: lo.Size, ModTime: lo.ModTime}, nil) {
				return
			}
		}
	}
}

// SweepTemp deletes staging objects that Put or PutContent left behind (a
// process killed mid-upload) last modified before cutoff, and returns how many it
// deleted. Pass a cutoff well before any upload still in flight, such as
// an hour ago.
func (s *Store) SweepTemp(ctx context.Context, cutoff time.Time) (int, error) {
	var stale []string
	for o, err := range s.listRaw(ctx, "") {
		if err != nil {
			return 0, fmt.Errorf("sweep temp: %w", err)
		}
		staging := strings.HasPrefix(o.Key, tmpDir+"/") ||
			(s.scheme == "file" && strings.HasSuffix(o.Key, ".tmp"))
		if staging && o.ModTime.Before(cutoff) {
			stale = append(stale, o.Key)
		}
	}
	n := 0
	for _, key := range stale {
		err := s.bucket.Delete(ctx, key)
		if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return n, fmt.Errorf("sweep temp: delete %s: %w", key, err)
		}
		if err == nil {
			n++
		}
	}
	return n, nil
}

// mapErr turns the bucket's not-found into ErrNotFound and keeps other
// errors as they are.
func mapErr(err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return ErrNotFound
	}
	return err
}
