package blobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// PutContent stores the body read from r as a content-addressed object
// under prefix and returns its lowercase hex SHA-256 and length. The body
// streams to a staging key while it is hashed, then moves to
// KeyFor(prefix, sha) unless an object is already there (content addressing
// makes it identical), and the staging object is removed. Storing the same
// bytes twice is therefore cheap and does not rewrite the object. Calls
// storing the same bytes at once all succeed, and a reader of the key sees
// the whole object or none. On S3 the move is one CopyObject, which limits
// an object to 5 GiB; on the file backend it is a rename.
func (s *Store) PutContent(ctx context.Context, prefix string, r io.Reader) (sha string, size int64, err error) {
	return s.putContent(ctx, prefix, r, "")
}

// PutContentAs is PutContent for content whose digest the sender claims:
// when the bytes hash to anything else it stores nothing and returns an
// error wrapping ErrDigestMismatch.
func (s *Store) PutContentAs(ctx context.Context, prefix, want string, r io.Reader) (size int64, err error) {
	_, size, err = s.putContent(ctx, prefix, r, want)
	return size, err
}

func (s *Store) putContent(ctx context.Context, prefix string, r io.Reader, want string) (sha string, size int64, err error) {
	if err := ValidateKey(prefix); err != nil {
		return "", 0, fmt.Errorf("put content: prefix: %w", err)
	}
	tmp := newTmpKey()
	h := sha256.New()
	size, err = s.upload(ctx, tmp, io.TeeReader(r, h), nil)
	if err != nil {
		return "", size, fmt.Errorf("put content: %w", err)
	}
	// The staging object goes whatever happens next (after a rename there
	// is nothing left to delete).
	defer s.deleteTmp(ctx, tmp)
	sha = hex.EncodeToString(h.Sum(nil))
	if want != "" && sha != want {
		return "", size, fmt.Errorf("put content: %w: got %s, want %s", ErrDigestMismatch, sha, want)
	}
	key := prefix + "/" + sha
	if s.scheme == "file" {
		if err := s.publishFile(tmp, key, false); err != nil {
			return "", size, fmt.Errorf("put content: move to %s: %w", key, err)
		}
		return sha, size, nil
	}
	// S3 objects appear whole, so a racing writer's object is found
	// complete or not at all; two racing copies write the same bytes.
	ok, err := s.bucket.Exists(ctx, key)
	if err != nil {
		return "", size, fmt.Errorf("put content: exists %s: %w", key, mapErr(err))
	}
	if ok {
		return sha, size, nil
	}
	if err := s.bucket.Copy(ctx, key, tmp, nil); err != nil {
		return "", size, fmt.Errorf("put content: copy to %s: %w", key, mapErr(err))
	}
	return sha, size, nil
}

// GetContent opens the content-addressed object at key and checks, as it
// is read, that its bytes hash to sha: the read that would return io.EOF
// returns an error wrapping ErrDigestMismatch instead when they do not. A
// caller must therefore read to EOF before trusting the bytes (io.Copy and
// io.ReadAll do).
func (s *Store) GetContent(ctx context.Context, key, sha string) (io.ReadCloser, error) {
	if !ValidSHA256(sha) {
		return nil, fmt.Errorf("%w: %q is not a lowercase hex sha-256", ErrInvalidKey, sha)
	}
	var rc io.ReadCloser
	var err error
	if s.scheme == "file" {
		rc, err = s.openFile(ctx, key)
	} else {
		rc, err = s.Get(ctx, key)
	}
	if err != nil {
		return nil, err
	}
	return &verifyingReader{rc: rc, h: sha256.New(), want: sha, key: key}, nil
}

// openFile opens the file backend's object at key directly, at the path
// publishFile gives it, without fileblob's attributes sidecar: a
// content-addressed read needs no content type or MD5, as its bytes are
// checked against their digest, and skipping the sidecar halves the files
// opened per read.
func (s *Store) openFile(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, err := os.Open(filepath.Join(s.dir, filepath.FromSlash(key)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return f, nil
}

type verifyingReader struct {
	rc   io.ReadCloser
	h    hash.Hash
	want string
	key  string
	err  error // sticky verdict once EOF was seen
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	if errors.Is(err, io.EOF) {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			v.err = fmt.Errorf("%w: %s has %s, want %s", ErrDigestMismatch, v.key, got, v.want)
		} else {
			v.err = io.EOF
		}
		return n, v.err
	}
	return n, err
}

func (v *verifyingReader) Close() error { return v.rc.Close() }

// VerifySHA256 reads r to its end and checks that its bytes hash to want,
// a lowercase hex SHA-256. It returns the number of bytes read; a mismatch
// wraps ErrDigestMismatch.
func VerifySHA256(r io.Reader, want string) (int64, error) {
	if !ValidSHA256(want) {
		return 0, fmt.Errorf("verify sha-256: %q is not a lowercase hex sha-256", want)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return n, fmt.Errorf("verify sha-256: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return n, fmt.Errorf("%w: got %s, want %s", ErrDigestMismatch, got, want)
	}
	return n, nil
}
