package eval

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/suite"
)

// FixtureSigner mints and checks signed fixture URLs, gyre's documented
// extension of the contract for harnesses that cannot read the blob store
// (SPEC §7.2): {base}/fixtures/{tenant}/{sha256}?expires={unix}&signature={hex},
// where signature is HMAC-SHA256 over (tenant, sha256, expires) with a key
// that never leaves the process.
type FixtureSigner struct {
	key   []byte
	base  string
	clock clock.Clock
}

// NewFixtureSigner returns a signer for URLs under base (scheme and host,
// no trailing slash) with a fresh 256-bit key.
func NewFixtureSigner(base string, clk clock.Clock) (*FixtureSigner, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("fixture signing key: %w", err)
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &FixtureSigner{key: key, base: strings.TrimRight(base, "/"), clock: clk}, nil
}

func (s *FixtureSigner) mac(tenant, sha string, expires int64) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write([]byte(sha))
	m.Write([]byte{0})
	m.Write([]byte(strconv.FormatInt(expires, 10)))
	return m.Sum(nil)
}

// URL returns the signed URL of a tenant's fixture blob, valid for
// validFor from now.
func (s *FixtureSigner) URL(tenant, sha string, validFor time.Duration) string {
	exp := s.clock.Now().Add(validFor).Unix()
	return fmt.Sprintf("%s/fixtures/%s/%s?expires=%d&signature=%s", s.base, tenant, sha, exp,
		hex.EncodeToString(s.mac(tenant, sha, exp)))
}

// errBadSignature covers every refused URL alike, so that a caller learns
// nothing about which part was wrong.
var errBadSignature = errors.New("invalid or expired fixture signature")

// Verify checks a signed URL's parts, in constant time.
func (s *FixtureSigner) Verify(tenant, sha, expires, signature string) error {
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil || strconv.FormatInt(exp, 10) != expires {
		return errBadSignature
	}
	got, err := hex.DecodeString(signature)
	if err != nil {
		return errBadSignature
	}
	if !hmac.Equal(got, s.mac(tenant, sha, exp)) {
		return errBadSignature
	}
	if s.clock.Now().Unix() > exp {
		return errBadSignature
	}
	return nil
}

// Fixtures delivers a suite's fixture files to a harness: their bytes for
// multipart requests, and URLs for file_urls requests. In embedded mode
// the bytes are uploaded to the blob store under fixtures/<tenant>/<sha256>
// and read back from there; otherwise they are read from the suite's
// fixtures directory through an os.Root, checked against the digests the
// suite was loaded with.
type Fixtures struct {
	// Tenant owns the fixtures.
	Tenant string
	// Dir is the suite's fixtures directory.
	Dir string
	// Blobs, when set, holds the fixtures (embedded mode).
	Blobs *blobstore.Store
	// StoreURLs hands out blob store URLs (s3://…) for harnesses that
	// read the store themselves; otherwise Signer mints signed URLs.
	StoreURLs bool
	// Signer mints signed gyre URLs; required for file_urls delivery
	// without StoreURLs.
	Signer *FixtureSigner

	mu     sync.Mutex
	byHash map[string]string // sha256 -> fixture name
	sizes  map[string]int64  // sha256 -> size in bytes
}

// Prepare registers the suite's fixtures with their sizes (a multipart
// request declares its Content-Length up front) and, in embedded mode,
// uploads them to the blob store (content-addressed: stored once).
func (f *Fixtures) Prepare(ctx context.Context, s *suite.Suite) error {
	if len(s.Fixtures) == 0 {
		return nil
	}
	root, err := os.OpenRoot(f.Dir)
	if err != nil {
		return fmt.Errorf("fixtures: %w", err)
	}
	defer root.Close()
	f.mu.Lock()
	if f.byHash == nil {
		f.byHash, f.sizes = map[string]string{}, map[string]int64{}
	}
	f.mu.Unlock()
	for name, sum := range s.Fixtures {
		fi, err := root.Stat(name)
		if err != nil {
			return fmt.Errorf("fixture %s: %w", name, err)
		}
		f.mu.Lock()
		f.byHash[sum], f.sizes[sum] = name, fi.Size()
		f.mu.Unlock()
	}
	if f.Blobs == nil {
		return nil
	}
	for name, sum := range s.Fixtures {
		key, err := blobstore.FixtureKey(f.Tenant, sum)
		if err != nil {
			return fmt.Errorf("fixture %s: %w", name, err)
		}
		if ok, err := f.Blobs.Exists(ctx, key); err != nil {
			return fmt.Errorf("fixture %s: %w", name, err)
		} else if ok {
			continue
		}
		file, err := root.Open(name)
		if err != nil {
			return fmt.Errorf("fixture %s: %w", name, err)
		}
		got, _, err := f.Blobs.PutContent(ctx, blobstore.FixturePrefix+"/"+f.Tenant, file)
		file.Close()
		if err != nil {
			return fmt.Errorf("upload fixture %s: %w", name, err)
		}
		if got != sum {
			return fmt.Errorf("fixture %s changed since the suite was loaded (sha256 %s, was %s)", name, got, sum)
		}
	}
	return nil
}

// Open opens the bytes of a fixture revision; reading them to the end
// fails if they do not hash to file.SHA256.
func (f *Fixtures) Open(ctx context.Context, file suite.File) (io.ReadCloser, error) {
	return f.openHash(ctx, file.Name, file.SHA256)
}

// Size is the size in bytes of a fixture revision that Prepare
// registered.
func (f *Fixtures) Size(file suite.File) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.sizes[file.SHA256]
	if !ok {
		return 0, fmt.Errorf("fixture %s was not prepared", file.Name)
	}
	return n, nil
}

func (f *Fixtures) openHash(ctx context.Context, name, sum string) (io.ReadCloser, error) {
	if f.Blobs != nil {
		key, err := blobstore.FixtureKey(f.Tenant, sum)
		if err != nil {
			return nil, err
		}
		return f.Blobs.GetContent(ctx, key, sum)
	}
	root, err := os.OpenRoot(f.Dir)
	if err != nil {
		return nil, fmt.Errorf("fixtures: %w", err)
	}
	defer root.Close()
	file, err := root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("fixture %s: %w", name, err)
	}
	return &digestReader{rc: file, h: sha256.New(), want: sum, name: name}, nil
}

// URL returns the URL a file_urls harness fetches file from, valid for at
// least validFor.
func (f *Fixtures) URL(file suite.File, validFor time.Duration) (string, error) {
	if f.StoreURLs && f.Blobs != nil {
		key, err := blobstore.FixtureKey(f.Tenant, file.SHA256)
		if err != nil {
			return "", err
		}
		return f.Blobs.URL(key)
	}
	if f.Signer == nil {
		return "", errors.New("no fixture URL signer: file_urls delivery needs a fixture listener")
	}
	return f.Signer.URL(f.Tenant, file.SHA256, validFor), nil
}

// Handler serves signed fixture URLs: GET and HEAD
// /fixtures/{tenant}/{sha256}?expires=&signature=. Anything unsigned,
// expired, foreign or unknown is 404, alike.
func (f *Fixtures) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fixtures/{tenant}/{sha}", func(w http.ResponseWriter, r *http.Request) {
		tenant, sum := r.PathValue("tenant"), r.PathValue("sha")
		q := r.URL.Query()
		if f.Signer == nil || tenant != f.Tenant || !blobstore.ValidSHA256(sum) ||
			f.Signer.Verify(tenant, sum, q.Get("expires"), q.Get("signature")) != nil {
			http.NotFound(w, r)
			return
		}
		f.mu.Lock()
		name, ok := f.byHash[sum]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		rc, err := f.openHash(r.Context(), name, sum)
		if err != nil {
			http.Error(w, "fixture unavailable", http.StatusInternalServerError)
			return
		}
		defer rc.Close()
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
		h.Set("ETag", `"`+sum+`"`)
		h.Set("Cache-Control", "private, no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		if r.Method == http.MethodHead {
			return
		}
		if _, err := io.Copy(w, rc); err != nil {
			// A digest mismatch or read error: cut the body short rather
			// than complete it with wrong bytes.
			panic(http.ErrAbortHandler)
		}
	})
	return mux
}

// digestReader checks at EOF that the bytes read hash to want.
type digestReader struct {
	rc   io.ReadCloser
	h    hash.Hash
	want string
	name string
}

func (d *digestReader) Read(p []byte) (int, error) {
	n, err := d.rc.Read(p)
	d.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		if got := hex.EncodeToString(d.h.Sum(nil)); got != d.want {
			return n, fmt.Errorf("fixture %s changed since the suite was loaded (sha256 %s, was %s)", d.name, got, d.want)
		}
	}
	return n, err
}

func (d *digestReader) Close() error { return d.rc.Close() }
