package blobstore

import (
	"bytes"
	"runtime"
	"testing"
)

// A small body is copied to the file backend through a pooled buffer,
// not a fresh 1 MiB one per upload (gocloud's Writer.ReadFrom allocates
// that for a reader without WriteTo). Not parallel: it reads the process's
// allocation counter.
func TestSmallPutDoesNotAllocateAMegabyte(t *testing.T) {
	s, err := Open(t.Context(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const puts = 50
	bodies := make([][]byte, puts)
	for i := range bodies {
		bodies[i] = []byte{'b', byte(i), byte(i >> 8)}
	}
	if _, _, err := s.PutContent(t.Context(), "p", bytes.NewReader([]byte("warm"))); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, b := range bodies {
		if _, _, err := s.PutContent(t.Context(), "p", bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / puts; per > 256<<10 {
		t.Errorf("a %d-byte put allocates %d bytes; want under 256 KiB", len(bodies[0]), per)
	}
}
