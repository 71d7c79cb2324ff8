package blobstore

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileWritesReplaceNotRewrite checks, deterministically, the property
// the file backend's concurrency rests on: a write to an existing key
// replaces the object's data file and attribute sidecar with new files
// and never rewrites them in place. fileblob on its own truncates the live
// sidecar and writes it again, and a reader that opens it in between
// decodes an empty file and fails with io.EOF; ConcurrentSameContent and
// OverwriteWhileReading catch that window by stress.
func TestFileWritesReplaceNotRewrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(t.Context(), "file://"+filepath.ToSlash(dir)+"?prefix=p", "")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	ctx := t.Context()

	data, attrs := filepath.Join(dir, "p", "k", "obj"), filepath.Join(dir, "p", "k", "obj"+attrsSuffix)
	// open opens the object's two files, as a reader in the middle of a
	// Get holds them.
	open := func() (*os.File, *os.File) {
		t.Helper()
		d, err := os.Open(data)
		if err != nil {
			t.Fatal(err)
		}
		a, err := os.Open(attrs)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close(); a.Close() })
		return d, a
	}
	// check fails unless the files a reader opened still hold the whole
	// earlier object, and the names now lead to other files.
	check := func(what string, d, a *os.File, body, contentType string) {
		t.Helper()
		if got, err := io.ReadAll(d); err != nil || string(got) != body {
			t.Errorf("%s: a reader's open data file reads %q, %v; want the earlier body %q", what, got, err, body)
		}
		var xa struct {
			ContentType string `json:"user.content_type"`
		}
		if err := json.NewDecoder(a).Decode(&xa); err != nil || xa.ContentType != contentType {
			t.Errorf("%s: a reader's open sidecar decodes to %q, %v; want the earlier %q", what, xa.ContentType, err, contentType)
		}
		for _, f := range []*os.File{d, a} {
			was, err1 := f.Stat()
			now, err2 := os.Stat(f.Name())
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: stat %s: %v, %v", what, f.Name(), err1, err2)
			}
			if os.SameFile(was, now) {
				t.Errorf("%s: %s was rewritten in place, not replaced", what, filepath.Base(f.Name()))
			}
		}
	}

	if _, err := s.Put(ctx, "k/obj", strings.NewReader("first"), &PutOptions{ContentType: "text/plain"}); err != nil {
		t.Fatal(err)
	}
	d, a := open()
	if _, err := s.Put(ctx, "k/obj", strings.NewReader("second body"), &PutOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	check("Put over an object", d, a, "first", "text/plain")
	if st, err := s.Stat(ctx, "k/obj"); err != nil || st.Size != int64(len("second body")) || st.ContentType != "application/json" {
		t.Errorf("after the overwrite Stat = %+v, %v", st, err)
	}
	assertNoStrays(t, s)

	// Publishing staged content over a key that holds it already (what a
	// PutContent that lost the race to another does) replaces too.
	tmp := newTmpKey()
	if _, err := s.upload(ctx, tmp, strings.NewReader("third"), &PutOptions{ContentType: "text/csv"}); err != nil {
		t.Fatal(err)
	}
	d, a = open()
	if err := s.publishFile(tmp, "k/obj", true); err != nil {
		t.Fatalf("publishFile: %v", err)
	}
	check("publishing over an object", d, a, "second body", "application/json")
	if got := get(t, s, "k/obj"); !bytes.Equal(got, []byte("third")) {
		t.Errorf("after publishing Get = %q, want third", got)
	}
	assertNoStrays(t, s)

	// Without replace an existing object stays, and so does the staged one
	// for its owner to delete.
	tmp = newTmpKey()
	if _, err := s.upload(ctx, tmp, strings.NewReader("fourth"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.publishFile(tmp, "k/obj", false); err != nil {
		t.Fatalf("publishFile without replace: %v", err)
	}
	if got := string(get(t, s, "k/obj")); got != "third" {
		t.Errorf("publishFile without replace changed the object to %q", got)
	}
	if got, err := s.bucket.ReadAll(ctx, tmp); err != nil || string(got) != "fourth" {
		t.Errorf("publishFile without replace lost the staged object: %q, %v", got, err)
	}
	s.deleteTmp(ctx, tmp)
	assertNoStrays(t, s)
}
