package secret_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/secret"
)

var raw = bytes.Repeat([]byte{0x5a}, 32)

func mustKey(t *testing.T, s string) *secret.Key {
	t.Helper()
	k, err := secret.ParseKey(s)
	if err != nil {
		t.Fatalf("ParseKey: %v", err)
	}
	return k
}

// The key is 32 bytes in hex or any base64 alphabet; every other value,
// a passphrase included, is refused without being repeated.
func TestKeyFormatIs32BytesHexOrBase64(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"hex", hex.EncodeToString(raw), true},
		{"hex upper case with spaces", "  " + strings.ToUpper(hex.EncodeToString(raw)) + "\n", true},
		{"base64", base64.StdEncoding.EncodeToString(raw), true},
		{"base64 unpadded", base64.RawStdEncoding.EncodeToString(raw), true},
		{"base64url", base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32)), true},
		{"empty", "", false},
		{"passphrase", "correct horse battery staple", false},
		{"16 bytes hex", hex.EncodeToString(raw[:16]), false},
		{"31 bytes base64", base64.StdEncoding.EncodeToString(raw[:31]), false},
		{"33 bytes base64", base64.StdEncoding.EncodeToString(append(raw, 1)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := secret.ParseKey(tc.value)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseKey(%q) error = %v, want ok %v", tc.value, err, tc.ok)
			}
			if err != nil && tc.value != "" && strings.Contains(err.Error(), strings.TrimSpace(tc.value)) {
				t.Fatalf("the error repeats the secret: %v", err)
			}
		})
	}
	// The same bytes in any encoding are the same key.
	a, b := mustKey(t, hex.EncodeToString(raw)), mustKey(t, base64.StdEncoding.EncodeToString(raw))
	if a.ID() != b.ID() {
		t.Fatalf("key ids %q and %q differ for the same bytes", a.ID(), b.ID())
	}
}

// A sealed value opens with its key and context only, never holds the
// plaintext, and two seals of one value differ (a fresh nonce each).
func TestSealOpensOnlyWithItsKeyAndContext(t *testing.T) {
	t.Parallel()
	k := mustKey(t, hex.EncodeToString(raw))
	other := mustKey(t, hex.EncodeToString(bytes.Repeat([]byte{1}, 32)))
	plain := []byte("harness-api-key-0123456789")
	aad := []byte("tenant\x00harness")
	s1, err := k.Seal(plain, aad)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := k.Seal(plain, aad)
	if bytes.Equal(s1, s2) {
		t.Fatal("two seals of one value are equal: the nonce is not fresh")
	}
	if bytes.Contains(s1, plain) {
		t.Fatal("the sealed value holds the plaintext")
	}
	if !strings.HasPrefix(k.ID(), "v1:") || len(k.ID()) != 3+16 || strings.Contains(k.ID(), hex.EncodeToString(raw[:8])) {
		t.Fatalf("key id %q: want v1: and 16 hex digits that are not the key's", k.ID())
	}
	got, err := k.Open(s1, k.ID(), aad)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q, %v; want the plaintext", got, err)
	}
	if _, err := other.Open(s1, k.ID(), aad); !errors.Is(err, secret.ErrWrongKey) {
		t.Fatalf("Open under another key: %v, want ErrWrongKey", err)
	}
	if _, err := k.Open(s1, k.ID(), []byte("tenant\x00another")); !errors.Is(err, secret.ErrCorrupt) {
		t.Fatalf("Open in another context: %v, want ErrCorrupt", err)
	}
	flipped := bytes.Clone(s1)
	flipped[len(flipped)-1] ^= 1
	if _, err := k.Open(flipped, k.ID(), aad); !errors.Is(err, secret.ErrCorrupt) {
		t.Fatalf("Open of a changed value: %v, want ErrCorrupt", err)
	}
	if _, err := k.Open(s1[:10], k.ID(), aad); !errors.Is(err, secret.ErrCorrupt) {
		t.Fatalf("Open of a truncated value: %v, want ErrCorrupt", err)
	}
}
