package blobstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// backend opens a fresh, empty store for one test.
type backend struct {
	open func(t *testing.T) *Store
	// url is the URL URL(key) must return for key in store s.
	url func(s *Store, key string) string
	// raceRounds is how many rounds ConcurrentSameContent runs: enough
	// for the file backend to hit a narrow window nearly every run, fewer
	// where each round trip is slow.
	raceRounds int
}

func TestFileStore(t *testing.T) {
	t.Parallel()
	testStore(t, backend{
		open: func(t *testing.T) *Store {
			dir := t.TempDir()
			s, err := Open(t.Context(), "", dir)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		url:        func(s *Store, key string) string { return s.base + key },
		raceRounds: 50,
	})
}

// s3TestURL returns the S3 server the tests run against, from
// GYRE_TEST_S3_URL (scripts/testenv.sh starts one). Without it the test
// skips, or fails when GYRE_REQUIRE_S3=1.
func s3TestURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("GYRE_TEST_S3_URL")
	if u == "" {
		if r := os.Getenv("GYRE_REQUIRE_S3"); r != "" && r != "0" {
			t.Fatal("GYRE_REQUIRE_S3 is set but GYRE_TEST_S3_URL is not: run the tests through scripts/testenv.sh (make test), which starts an S3 server")
		}
		t.Skip("!!! SKIPPING S3 BLOB STORE TESTS: GYRE_TEST_S3_URL is not set. " +
			"Run `make test` (scripts/testenv.sh starts moto_server) to test against a real S3 server. !!!")
	}
	return u
}

func TestS3Store(t *testing.T) {
	t.Parallel()
	base := s3TestURL(t)
	pu, err := url.Parse(base)
	if err != nil {
		t.Fatalf("GYRE_TEST_S3_URL: %v", err)
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	testStore(t, backend{
		open: func(t *testing.T) *Store {
			// A prefix of its own keeps each test's objects apart in the
			// one shared bucket.
			prefix := "test-" + strings.ToLower(rand.Text())
			s, err := Open(t.Context(), base+sep+"prefix="+prefix+"/", "")
			if err != nil {
				t.Fatalf("Open(%s): %v", base, err)
			}
			t.Cleanup(func() {
				ctx := context.Background()
				var keys []string
				for o, err := range s.listRaw(ctx, "") {
					if err != nil {
						t.Errorf("cleanup list: %v", err)
						break
					}
					keys = append(keys, o.Key)
				}
				for _, k := range keys {
					_ = s.bucket.Delete(ctx, k)
				}
				_ = s.Close()
			})
			return s
		},
		url: func(s *Store, key string) string {
			return "s3://" + pu.Host + "/" + strings.TrimPrefix(s.base, "s3://"+pu.Host+"/") + key
		},
		raceRounds: 6,
	})
}

// testStore is the conformance suite every backend passes.
func testStore(t *testing.T, b backend) {
	ctx := t.Context()

	t.Run("RoundTripBinary", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		body := make([]byte, 256*4)
		for i := range body {
			body[i] = byte(i)
		}
		n, err := s.Put(ctx, "a/b/bin", bytes.NewReader(body), &PutOptions{ContentType: "application/x-gyre-test"})
		if err != nil || n != int64(len(body)) {
			t.Fatalf("Put = %d, %v; want %d, nil", n, err, len(body))
		}
		if got := get(t, s, "a/b/bin"); !bytes.Equal(got, body) {
			t.Fatalf("Get returned %d bytes that differ from the %d put", len(got), len(body))
		}
		st, err := s.Stat(ctx, "a/b/bin")
		if err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if st.Key != "a/b/bin" || st.Size != int64(len(body)) || st.ContentType != "application/x-gyre-test" || st.ModTime.IsZero() {
			t.Errorf("Stat = %+v", st)
		}
		if ok, err := s.Exists(ctx, "a/b/bin"); !ok || err != nil {
			t.Errorf("Exists = %v, %v; want true", ok, err)
		}
	})

	t.Run("DefaultContentTypeAndEmpty", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		// An HTML-looking body must not be sniffed as text/html.
		if _, err := s.Put(ctx, "page", strings.NewReader("<html><body>hi</body></html>"), nil); err != nil {
			t.Fatalf("Put: %v", err)
		}
		if st, err := s.Stat(ctx, "page"); err != nil || st.ContentType != DefaultContentType {
			t.Errorf("Stat = %+v, %v; want content type %s", st, err, DefaultContentType)
		}
		if n, err := s.Put(ctx, "empty", strings.NewReader(""), nil); err != nil || n != 0 {
			t.Fatalf("Put empty = %d, %v", n, err)
		}
		if got := get(t, s, "empty"); len(got) != 0 {
			t.Errorf("empty object read back %d bytes", len(got))
		}
	})

	t.Run("LargeStream", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		// Past the multipart threshold, generated as it is read: the store
		// must stream it in parts, as nothing holds the whole body.
		const size = multipartThreshold + partSize + 123457
		src := newPseudoRandom(1, size)
		n, err := s.Put(ctx, "big/stream", src, nil)
		if err != nil || n != size {
			t.Fatalf("Put = %d, %v; want %d", n, err, size)
		}
		rc, err := s.Get(ctx, "big/stream")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		defer rc.Close()
		h := sha256.New()
		got, err := io.Copy(h, rc)
		if err != nil || got != size {
			t.Fatalf("read back %d bytes, %v; want %d", got, err, size)
		}
		if sum := hex.EncodeToString(h.Sum(nil)); sum != src.sum() {
			t.Fatalf("read back sha256 %s, put %s", sum, src.sum())
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		if _, err := s.Get(ctx, "no/such"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get = %v, want ErrNotFound", err)
		}
		if _, err := s.Stat(ctx, "no/such"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Stat = %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "no/such"); !errors.Is(err, ErrNotFound) {
			t.Errorf("Delete = %v, want ErrNotFound", err)
		}
		if ok, err := s.Exists(ctx, "no/such"); ok || err != nil {
			t.Errorf("Exists = %v, %v; want false, nil", ok, err)
		}
		if _, err := s.GetContent(ctx, "no/such", strings.Repeat("0", 64)); !errors.Is(err, ErrNotFound) {
			t.Errorf("GetContent = %v, want ErrNotFound", err)
		}
	})

	t.Run("Overwrite", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		put(t, s, "k", "first")
		put(t, s, "k", "second")
		if got := string(get(t, s, "k")); got != "second" {
			t.Errorf("after overwrite Get = %q, want second", got)
		}
	})

	t.Run("FailedBodyStoresNothing", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		boom := errors.New("client went away")
		// Past the multipart threshold, so a multipart upload is under way
		// on S3 and must be aborted.
		body := io.MultiReader(newPseudoRandom(2, multipartThreshold+partSize+1000), errReader{boom})
		if _, err := s.Put(ctx, "partial/new", body, nil); !errors.Is(err, boom) {
			t.Fatalf("Put = %v, want the reader's error", err)
		}
		if ok, err := s.Exists(ctx, "partial/new"); ok || err != nil {
			t.Errorf("after a failed Put, Exists = %v, %v; want false", ok, err)
		}
		// The caller's context ending mid-stream stores nothing either.
		cctx, cancel := context.WithCancel(ctx)
		body = io.MultiReader(newPseudoRandom(3, multipartThreshold+partSize+1000),
			cancelReader{cancel}, newPseudoRandom(4, partSize))
		if _, err := s.Put(cctx, "partial/cancelled", body, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("Put = %v, want context.Canceled", err)
		}
		if ok, err := s.Exists(ctx, "partial/cancelled"); ok || err != nil {
			t.Errorf("after a cancelled Put, Exists = %v, %v; want false", ok, err)
		}
		assertNoOpenUploads(t, s)
		// A failed overwrite keeps the old object.
		put(t, s, "partial/old", "keep me")
		short := io.MultiReader(strings.NewReader("half a bo"), errReader{boom})
		if _, err := s.Put(ctx, "partial/old", short, nil); !errors.Is(err, boom) {
			t.Fatalf("Put = %v, want the reader's error", err)
		}
		if got := string(get(t, s, "partial/old")); got != "keep me" {
			t.Errorf("after a failed overwrite Get = %q, want the old body", got)
		}
		// So does a context cancelled before the Put.
		cctx, cancel = context.WithCancel(ctx)
		cancel()
		if _, err := s.Put(cctx, "partial/precancelled", strings.NewReader("x"), nil); err == nil {
			t.Errorf("Put with a cancelled context succeeded")
		}
		if ok, _ := s.Exists(ctx, "partial/precancelled"); ok {
			t.Errorf("Put with a cancelled context stored an object")
		}
		assertNoStrays(t, s)
	})

	t.Run("MaxSize", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		opts := &PutOptions{MaxSize: 10}
		if n, err := s.Put(ctx, "max/ok", strings.NewReader("0123456789"), opts); err != nil || n != 10 {
			t.Fatalf("Put of exactly MaxSize = %d, %v", n, err)
		}
		if _, err := s.Put(ctx, "max/over", strings.NewReader("0123456789A"), opts); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Put over MaxSize = %v, want ErrTooLarge", err)
		}
		if ok, _ := s.Exists(ctx, "max/over"); ok {
			t.Errorf("an oversized body was stored")
		}
		// Past the multipart threshold too.
		big := &PutOptions{MaxSize: multipartThreshold + 10}
		if _, err := s.Put(ctx, "max/big", newPseudoRandom(5, multipartThreshold+partSize), big); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Put over MaxSize = %v, want ErrTooLarge", err)
		}
		if ok, _ := s.Exists(ctx, "max/big"); ok {
			t.Errorf("an oversized body was stored")
		}
		assertNoOpenUploads(t, s)
		assertNoStrays(t, s)
	})

	t.Run("ContentAddressed", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		data := []byte("the same bytes\x00\xff twice")
		sum := sha256.Sum256(data)
		want := hex.EncodeToString(sum[:])

		sha, size, err := s.PutContent(ctx, "blobs/t1", bytes.NewReader(data))
		if err != nil || sha != want || size != int64(len(data)) {
			t.Fatalf("PutContent = %s, %d, %v; want %s, %d", sha, size, err, want, len(data))
		}
		key, err := KeyFor("blobs/t1", sha)
		if err != nil {
			t.Fatal(err)
		}
		if got := get(t, s, key); !bytes.Equal(got, data) {
			t.Fatalf("object at %s differs from the content put", key)
		}
		rc, err := s.GetContent(ctx, key, sha)
		if err != nil {
			t.Fatalf("GetContent: %v", err)
		}
		if got, err := io.ReadAll(rc); err != nil || !bytes.Equal(got, data) {
			t.Errorf("GetContent read %q, %v", got, err)
		}
		rc.Close()

		// Prove the second put does not rewrite: plant other bytes at the
		// key; an idempotent PutContent leaves them alone.
		put(t, s, key, "planted")
		sha2, size2, err := s.PutContent(ctx, "blobs/t1", bytes.NewReader(data))
		if err != nil || sha2 != want || size2 != size {
			t.Fatalf("second PutContent = %s, %d, %v", sha2, size2, err)
		}
		if got := string(get(t, s, key)); got != "planted" {
			t.Errorf("second PutContent rewrote the existing object")
		}
		// GetContent notices the planted bytes do not match the key.
		rc, err = s.GetContent(ctx, key, sha)
		if err != nil {
			t.Fatalf("GetContent: %v", err)
		}
		if _, err := io.ReadAll(rc); !errors.Is(err, ErrDigestMismatch) {
			t.Errorf("GetContent of mismatched bytes read err %v, want ErrDigestMismatch", err)
		}
		rc.Close()

		var keys []string
		for o, err := range s.List(ctx, "blobs/") {
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			keys = append(keys, o.Key)
		}
		if !slices.Equal(keys, []string{key}) {
			t.Errorf("List(blobs/) = %q, want just %s", keys, key)
		}
		assertNoStrays(t, s)
	})

	t.Run("ContentAddressedLargeAndFailed", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		src := newPseudoRandom(3, partSize+4321)
		sha, size, err := s.PutContent(ctx, "traj", src)
		if err != nil || sha != src.sum() || size != src.size {
			t.Fatalf("PutContent = %s, %d, %v; want %s, %d", sha, size, err, src.sum(), src.size)
		}
		boom := errors.New("broken pipe")
		if _, _, err := s.PutContent(ctx, "traj", io.MultiReader(strings.NewReader("abc"), errReader{boom})); !errors.Is(err, boom) {
			t.Fatalf("PutContent of a failing reader = %v, want its error", err)
		}
		n := 0
		for _, err := range s.List(ctx, "traj/") {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != 1 {
			t.Errorf("List(traj/) has %d objects, want 1", n)
		}
		assertNoStrays(t, s)
	})

	t.Run("InvalidKeys", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		for _, key := range []string{"", "/abs", "a/../b", "..", "a//b", "a b", ".tmp/x", "x.attrs"} {
			if _, err := s.Put(ctx, key, strings.NewReader("x"), nil); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Stat(%q) = %v, want ErrInvalidKey", key, err)
			}
			if _, err := s.Exists(ctx, key); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Exists(%q) = %v, want ErrInvalidKey", key, err)
			}
			if err := s.Delete(ctx, key); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
			}
			if _, err := s.URL(key); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("URL(%q) = %v, want ErrInvalidKey", key, err)
			}
			if _, _, err := s.PutContent(ctx, key, strings.NewReader("x")); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("PutContent(%q) = %v, want ErrInvalidKey", key, err)
			}
		}
		for _, prefix := range []string{"/", "../", "a//", "a b"} {
			for _, err := range s.List(ctx, prefix) {
				if !errors.Is(err, ErrInvalidKey) {
					t.Errorf("List(%q) yielded %v, want ErrInvalidKey", prefix, err)
				}
			}
		}
		assertNoStrays(t, s)
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		for _, k := range []string{"list/b/1", "list/a/2", "list/a/1", "lista/x", "other"} {
			put(t, s, k, k)
		}
		tests := []struct {
			prefix string
			want   []string
		}{
			{"list/a/", []string{"list/a/1", "list/a/2"}},
			{"list/", []string{"list/a/1", "list/a/2", "list/b/1"}},
			{"list", []string{"list/a/1", "list/a/2", "list/b/1", "lista/x"}},
			{"", []string{"list/a/1", "list/a/2", "list/b/1", "lista/x", "other"}},
			{"nothing/", nil},
		}
		for _, tt := range tests {
			var got []string
			for o, err := range s.List(ctx, tt.prefix) {
				if err != nil {
					t.Fatalf("List(%q): %v", tt.prefix, err)
				}
				if o.Size != int64(len(o.Key)) {
					t.Errorf("List(%q): %s has size %d, want %d", tt.prefix, o.Key, o.Size, len(o.Key))
				}
				got = append(got, o.Key)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("List(%q) = %q, want %q", tt.prefix, got, tt.want)
			}
		}
		// Stopping early is allowed.
		for range s.List(ctx, "") {
			break
		}
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		put(t, s, "del/me", "x")
		put(t, s, "del/keep", "y")
		if err := s.Delete(ctx, "del/me"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if ok, err := s.Exists(ctx, "del/me"); ok || err != nil {
			t.Errorf("after Delete Exists = %v, %v", ok, err)
		}
		if err := s.Delete(ctx, "del/me"); !errors.Is(err, ErrNotFound) {
			t.Errorf("second Delete = %v, want ErrNotFound", err)
		}
		if got := string(get(t, s, "del/keep")); got != "y" {
			t.Errorf("Delete removed a neighbour: %q", got)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		shared := bytes.Repeat([]byte("shared content "), 1000)
		sum := sha256.Sum256(shared)
		want := hex.EncodeToString(sum[:])
		const workers = 8
		var wg sync.WaitGroup
		errs := make(chan error, 2*workers)
		for i := range workers {
			wg.Go(func() {
				sha, _, err := s.PutContent(ctx, "conc", bytes.NewReader(shared))
				if err == nil && sha != want {
					err = fmt.Errorf("worker %d: sha %s, want %s", i, sha, want)
				}
				errs <- err
				_, err = s.Put(ctx, fmt.Sprintf("conc-own/%d", i), strings.NewReader(strings.Repeat(fmt.Sprint(i), 5000)), nil)
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		key, _ := KeyFor("conc", want)
		if got := get(t, s, key); !bytes.Equal(got, shared) {
			t.Errorf("concurrent PutContent left %d wrong bytes", len(got))
		}
		for i := range workers {
			if got := string(get(t, s, fmt.Sprintf("conc-own/%d", i))); got != strings.Repeat(fmt.Sprint(i), 5000) {
				t.Errorf("conc-own/%d holds the wrong body", i)
			}
		}
		assertNoStrays(t, s)
	})

	t.Run("ConcurrentSameContent", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		// Many writers store the same bytes at once while readers watch
		// the key: every PutContent either writes the object or finds a
		// complete one, and a reader sees the object whole or not at all.
		// A fresh body per round reopens the window in which several
		// writers all find the key missing.
		const writers, readers = 8, 2
		for round := range b.raceRounds {
			data := bytes.Repeat([]byte(fmt.Sprintf("round %d of the same bytes\n", round)), 600)
			sum := sha256.Sum256(data)
			want := hex.EncodeToString(sum[:])
			key, err := KeyFor("same", want)
			if err != nil {
				t.Fatal(err)
			}
			start := make(chan struct{})
			var writing, reading sync.WaitGroup
			errs := make(chan error, writers+readers)
			for i := range writers {
				writing.Go(func() {
					<-start
					sha, size, err := s.PutContent(ctx, "same", bytes.NewReader(data))
					if err == nil && (sha != want || size != int64(len(data))) {
						err = fmt.Errorf("writer %d: %s, %d; want %s, %d", i, sha, size, want, len(data))
					}
					errs <- err
				})
			}
			done := make(chan struct{})
			for range readers {
				reading.Go(func() {
					<-start
					errs <- readWhole(ctx, s, done, key, want, int64(len(data)))
				})
			}
			close(start)
			writing.Wait()
			close(done)
			reading.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			}
			if t.Failed() {
				break
			}
			if got := get(t, s, key); !bytes.Equal(got, data) {
				t.Fatalf("round %d: %s holds %d wrong bytes", round, key, len(got))
			}
		}
		assertNoStrays(t, s)
	})

	t.Run("OverwriteWhileReading", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		// Writers replace one key with bodies of their own while readers
		// read it: a reader sees one whole body, never a failure.
		const writers, readers, puts = 4, 2, 10
		bodies := make(map[string]bool, writers)
		for i := range writers {
			bodies[strings.Repeat(fmt.Sprint(i), 4000+i)] = true
		}
		put(t, s, "over/k", strings.Repeat("0", 4000))
		start, done := make(chan struct{}), make(chan struct{})
		var writing, reading sync.WaitGroup
		errs := make(chan error, writers*puts+readers)
		for i := range writers {
			writing.Go(func() {
				<-start
				body := strings.Repeat(fmt.Sprint(i), 4000+i)
				for range puts {
					_, err := s.Put(ctx, "over/k", strings.NewReader(body), &PutOptions{ContentType: "text/plain"})
					errs <- err
				}
			})
		}
		for range readers {
			reading.Go(func() {
				<-start
				for {
					select {
					case <-done:
						errs <- nil
						return
					default:
					}
					if _, err := s.Stat(ctx, "over/k"); err != nil {
						errs <- fmt.Errorf("stat during overwrite: %w", err)
						return
					}
					rc, err := s.Get(ctx, "over/k")
					if err != nil {
						errs <- fmt.Errorf("get during overwrite: %w", err)
						return
					}
					got, err := io.ReadAll(rc)
					rc.Close()
					if err != nil || !bodies[string(got)] {
						errs <- fmt.Errorf("read during overwrite: %d bytes that are no body put, %v", len(got), err)
						return
					}
				}
			})
		}
		close(start)
		writing.Wait()
		close(done)
		reading.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if got := string(get(t, s, "over/k")); !bodies[got] {
			t.Errorf("after the overwrites the key holds %d bytes that are no body put", len(got))
		}
		assertNoStrays(t, s)
	})

	t.Run("URL", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		key, err := FixtureKey("default", strings.Repeat("c", 64))
		if err != nil {
			t.Fatal(err)
		}
		put(t, s, key, "fixture")
		got, err := s.URL(key)
		if err != nil {
			t.Fatal(err)
		}
		if want := b.url(s, key); got != want {
			t.Errorf("URL = %q, want %q", got, want)
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("URL %q does not parse: %v", got, err)
		}
		if !strings.HasSuffix(u.Path, "/"+key) {
			t.Errorf("URL %q does not end with the key", got)
		}
		if u.Scheme == "file" {
			// A harness that reads the store finds the bytes there.
			data, err := os.ReadFile(filepath.FromSlash(u.Path))
			if err != nil || string(data) != "fixture" {
				t.Errorf("reading %s: %q, %v", u.Path, data, err)
			}
		}
	})

	t.Run("SweepTemp", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		if _, err := s.put(ctx, tmpDir+"/stranded", strings.NewReader("x"), nil); err != nil {
			t.Fatal(err)
		}
		put(t, s, "kept", "y")
		if n, err := s.SweepTemp(ctx, time.Now().Add(-time.Hour)); n != 0 || err != nil {
			t.Errorf("SweepTemp with an old cutoff = %d, %v; want 0", n, err)
		}
		if n, err := s.SweepTemp(ctx, time.Now().Add(time.Hour)); n != 1 || err != nil {
			t.Errorf("SweepTemp = %d, %v; want 1", n, err)
		}
		assertNoStrays(t, s)
		if got := string(get(t, s, "kept")); got != "y" {
			t.Errorf("SweepTemp touched a real object")
		}
	})

	t.Run("Ping", func(t *testing.T) {
		t.Parallel()
		s := b.open(t)
		if err := s.Ping(ctx); err != nil {
			t.Errorf("Ping: %v", err)
		}
	})
}

func put(t *testing.T, s *Store, key, body string) {
	t.Helper()
	if _, err := s.Put(t.Context(), key, strings.NewReader(body), nil); err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
}

func get(t *testing.T, s *Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%s): read: %v", key, err)
	}
	return b
}

// readWhole reads the content-addressed object at key until done is
// closed. Before the object appears it may be missing; once found it must
// be whole: a complete body with the right digest, or an error.
func readWhole(ctx context.Context, s *Store, done <-chan struct{}, key, sha string, size int64) error {
	for {
		select {
		case <-done:
			return nil
		default:
		}
		ok, err := s.Exists(ctx, key)
		if err != nil {
			return fmt.Errorf("reader: %w", err)
		}
		if !ok {
			continue
		}
		st, err := s.Stat(ctx, key)
		if err != nil {
			return fmt.Errorf("reader: %w", err)
		}
		if st.Size != size {
			return fmt.Errorf("reader: stat %s: size %d, want %d", key, st.Size, size)
		}
		rc, err := s.GetContent(ctx, key, sha)
		if err != nil {
			return fmt.Errorf("reader: %w", err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n != size {
			return fmt.Errorf("reader: read %s: %d bytes, %v; want %d", key, n, err, size)
		}
	}
}

// assertNoStrays fails when a staging object or a temporary file of the
// file backend is left in the store.
func assertNoStrays(t *testing.T, s *Store) {
	t.Helper()
	for o, err := range s.listRaw(t.Context(), "") {
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if ValidateKey(o.Key) != nil {
			t.Errorf("stray object %q left in the store", o.Key)
		}
	}
}

// assertNoOpenUploads fails when an S3 store has a multipart upload open
// under its prefix: a failed Put must abort its upload.
func assertNoOpenUploads(t *testing.T, s *Store) {
	t.Helper()
	var client *s3.Client
	if !s.bucket.As(&client) {
		return
	}
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(s.base, "s3://"), "/")
	out, err := client.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{
		Bucket: aws.String(bucket),
		Prefix: aws.String(prefix),
	})
	if err != nil {
		t.Fatalf("ListMultipartUploads: %v", err)
	}
	for _, u := range out.Uploads {
		t.Errorf("multipart upload of %s left open", aws.ToString(u.Key))
	}
}

// pseudoRandom is a reader of size deterministic pseudo-random bytes,
// generated as read, that records their SHA-256.
type pseudoRandom struct {
	rng  *mrand.ChaCha8
	left int64
	size int64
	h    io.Writer
	sumf func() []byte
}

func newPseudoRandom(seed byte, size int64) *pseudoRandom {
	var s [32]byte
	s[0] = seed
	h := sha256.New()
	return &pseudoRandom{rng: mrand.NewChaCha8(s), left: size, size: size, h: h, sumf: func() []byte { return h.Sum(nil) }}
}

func (p *pseudoRandom) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	n, _ := p.rng.Read(b)
	p.h.Write(b[:n])
	p.left -= int64(n)
	return n, nil
}

// sum is the SHA-256 of the bytes read so far (all of them once drained).
func (p *pseudoRandom) sum() string { return hex.EncodeToString(p.sumf()) }

// cancelReader cancels a context when first read, then reads as empty.
type cancelReader struct{ cancel context.CancelFunc }

func (c cancelReader) Read([]byte) (int, error) {
	c.cancel()
	return 0, io.EOF
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
