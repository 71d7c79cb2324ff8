package blobstore

import (
	"errors"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("ab", 32)
	tests := []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"fixtures/default/" + sha, true},
		{"blobs/0193b7e0-5c1e-7a2b-8f00-000000000001/" + sha, true},
		{"A-Z_a-z.0-9", true},
		{"a/b.c/d", true},
		{"x.json", true},
		{strings.Repeat("a", 255), true},
		{strings.Repeat("a/", 511) + "ab", true}, // exactly 1024 bytes

		{"", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{".", false},
		{"..", false},
		{"a/../b", false},
		{"a/./b", false},
		{"../a", false},
		{".hidden", false},
		{"a/.tmp/x", false},
		{".tmp/x", false},
		{"a b", false},
		{"a\\b", false},
		{"a\x00b", false},
		{"a\nb", false},
		{"a%2Fb", false},
		{"a?b", false},
		{"a#b", false},
		{"a:b", false},
		{"é", false},
		{"a/b.attrs", false},
		{"a/b.tmp", false},
		{strings.Repeat("a", 256), false},
		{strings.Repeat("a/", 512) + "a", false}, // 1025 bytes
	}
	for _, tt := range tests {
		err := ValidateKey(tt.key)
		if tt.ok && err != nil {
			t.Errorf("ValidateKey(%q) = %v, want ok", tt.key, err)
		}
		if !tt.ok && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", tt.key, err)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"a", true},
		{"a/", true},
		{"fixtures/t1/ab", true},
		{"x.tmp", true}, // a prefix may end like a reserved name
		{"/", false},
		{"/a", false},
		{"a//", false},
		{"../", false},
		{"a/../", false},
		{"a b/", false},
	}
	for _, tt := range tests {
		err := validatePrefix(tt.prefix)
		if tt.ok != (err == nil) {
			t.Errorf("validatePrefix(%q) = %v, want ok=%v", tt.prefix, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("validatePrefix(%q) = %v, want ErrInvalidKey", tt.prefix, err)
		}
	}
}

func TestKeyFor(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("0f", 32)
	tests := []struct {
		prefix, sha string
		want        string // empty: an error is wanted
	}{
		{"blobs", sha, "blobs/" + sha},
		{"messages/t1", sha, "messages/t1/" + sha},
		{"", sha, ""},
		{"blobs/", sha, ""},
		{"../blobs", sha, ""},
		{"blobs", strings.ToUpper(sha), ""},
		{"blobs", sha[:63], ""},
		{"blobs", sha + "0", ""},
		{"blobs", strings.Repeat("g", 64), ""},
		{"blobs", "../" + sha[3:], ""},
	}
	for _, tt := range tests {
		got, err := KeyFor(tt.prefix, tt.sha)
		if tt.want == "" {
			if !errors.Is(err, ErrInvalidKey) {
				t.Errorf("KeyFor(%q, %q) = %q, %v; want ErrInvalidKey", tt.prefix, tt.sha, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("KeyFor(%q, %q) = %q, %v; want %q", tt.prefix, tt.sha, got, err, tt.want)
		}
	}
}

func TestFixtureKey(t *testing.T) {
	t.Parallel()
	sha := strings.Repeat("a1", 32)
	got, err := FixtureKey("0193b7e0-5c1e-7a2b-8f00-000000000001", sha)
	if want := "fixtures/0193b7e0-5c1e-7a2b-8f00-000000000001/" + sha; err != nil || got != want {
		t.Fatalf("FixtureKey = %q, %v; want %q", got, err, want)
	}
	for _, tenant := range []string{"", "a/b", "..", ".x", "a b"} {
		if k, err := FixtureKey(tenant, sha); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("FixtureKey(%q) = %q, %v; want ErrInvalidKey", tenant, k, err)
		}
	}
}

func TestValidSHA256(t *testing.T) {
	t.Parallel()
	tests := map[string]bool{
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855": true,
		"E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855": false,
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85":  false,
		"": false,
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85z": false,
	}
	for s, want := range tests {
		if got := ValidSHA256(s); got != want {
			t.Errorf("ValidSHA256(%q) = %v, want %v", s, got, want)
		}
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../a", "a/./b", "/a", "a//b", "x.attrs", ".tmp/x", "a\x00b", "é/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if ValidateKey(key) != nil {
			return
		}
		// A valid key is a clean relative path that stays inside a root
		// on every backend, and names no reserved file.
		if len(key) > MaxKeyLen || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
			t.Fatalf("valid key %q is not a clean relative path", key)
		}
		if path.Clean(key) != key || !filepath.IsLocal(key) {
			t.Fatalf("valid key %q does not clean to itself or leaves its root", key)
		}
		for seg := range strings.SplitSeq(key, "/") {
			if seg == "" || seg[0] == '.' {
				t.Fatalf("valid key %q has segment %q", key, seg)
			}
		}
		if strings.HasSuffix(key, ".attrs") || strings.HasSuffix(key, ".tmp") {
			t.Fatalf("valid key %q ends in a reserved suffix", key)
		}
		if validatePrefix(key) != nil || validatePrefix(key+"/") != nil {
			t.Fatalf("valid key %q is not a valid prefix", key)
		}
	})
}
