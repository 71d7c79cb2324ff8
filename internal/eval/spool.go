package eval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
)

// spoolMemory is how much a spool keeps in memory before it moves to a
// temporary file.
const spoolMemory = 4 << 20

// Spool collects a downloaded body (a trajectory, a workspace file) while
// hashing it: in memory up to 4 MiB, in a temporary file beyond. Close
// removes the file.
type Spool struct {
	buf  bytes.Buffer
	file *os.File
	h    hash.Hash
	n    int64
}

// NewSpool returns an empty spool.
func NewSpool() *Spool { return &Spool{h: sha256.New()} }

// Write appends p.
func (s *Spool) Write(p []byte) (int, error) {
	s.h.Write(p)
	s.n += int64(len(p))
	if s.file == nil && s.buf.Len()+len(p) > spoolMemory {
		f, err := os.CreateTemp("", "gyre-spool-")
		if err != nil {
			return 0, fmt.Errorf("spool: %w", err)
		}
		s.file = f
		if _, err := f.Write(s.buf.Bytes()); err != nil {
			return 0, fmt.Errorf("spool: %w", err)
		}
		s.buf = bytes.Buffer{}
	}
	if s.file != nil {
		return s.file.Write(p)
	}
	return s.buf.Write(p)
}

// Size is the number of bytes written.
func (s *Spool) Size() int64 { return s.n }

// SHA256 is the lowercase hex SHA-256 of the bytes written.
func (s *Spool) SHA256() string { return hex.EncodeToString(s.h.Sum(nil)) }

// Bytes returns the whole content.
func (s *Spool) Bytes() ([]byte, error) {
	if s.file == nil {
		return s.buf.Bytes(), nil
	}
	r, err := s.Reader()
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// Reader returns a reader of the whole content from its start. Each
// call returns an independent reader.
func (s *Spool) Reader() (io.ReadSeeker, error) {
	if s.file == nil {
		return bytes.NewReader(s.buf.Bytes()), nil
	}
	return io.NewSectionReader(s.file, 0, s.n), nil
}

// Close releases the spool's temporary file, if any.
func (s *Spool) Close() error {
	if s.file == nil {
		return nil
	}
	name := s.file.Name()
	err := s.file.Close()
	s.file = nil
	return errors.Join(err, os.Remove(name))
}
