package blobstore

import (
	"fmt"
	"strings"
)

// MaxKeyLen is the longest key in bytes, S3's limit.
const MaxKeyLen = 1024

const maxSegmentLen = 255

// tmpDir is where PutContent, and Put on the file backend, stage uploads.
// Its leading dot keeps it apart from every valid key, so no caller can
// name it.
const tmpDir = ".tmp"

// reservedSuffixes end file names that the file backend keeps for itself
// (attribute sidecars and in-flight writes).
var reservedSuffixes = []string{".attrs", ".tmp"}

// ValidateKey reports whether key is a well-formed blob key: 1 to
// MaxKeyLen bytes of slash-separated segments, each of 1 to 255 characters
// from [A-Za-z0-9._-] not starting with a dot (so no "." or ".."
// segments), no leading, trailing or doubled slash, and a last segment not
// ending in ".attrs" or ".tmp". The error wraps ErrInvalidKey.
func ValidateKey(key string) error {
	if err := checkSegments(key); err != nil {
		return err
	}
	last := key[strings.LastIndexByte(key, '/')+1:]
	for _, s := range reservedSuffixes {
		if strings.HasSuffix(last, s) {
			return fmt.Errorf("%w %q: suffix %s is reserved", ErrInvalidKey, key, s)
		}
	}
	return nil
}

// validatePrefix checks a List prefix: empty, or key segments optionally
// followed by a slash. A partial last segment ("fixtures/t1/ab") is fine.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return checkSegments(strings.TrimSuffix(prefix, "/"))
}

func checkSegments(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidKey, MaxKeyLen)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if err := checkSegment(seg); err != nil {
			return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, err)
		}
	}
	return nil
}

func checkSegment(seg string) error {
	switch {
	case seg == "":
		return errString("empty segment (leading, trailing or double slash)")
	case len(seg) > maxSegmentLen:
		return errString("segment longer than 255 bytes")
	case seg[0] == '.':
		return errString("segment starts with a dot")
	}
	for i := 0; i < len(seg); i++ {
		if !keyByte(seg[i]) {
			return fmt.Errorf("byte %#x not allowed", seg[i])
		}
	}
	return nil
}

type errString string

func (e errString) Error() string { return string(e) }

func keyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// ValidSHA256 reports whether s is a lowercase hex SHA-256 digest.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// KeyFor returns the key of the content-addressed object with digest sha
// under prefix: "<prefix>/<sha>". The prefix must itself be a valid key and
// sha a lowercase hex SHA-256; otherwise the error wraps ErrInvalidKey.
func KeyFor(prefix, sha string) (string, error) {
	if err := ValidateKey(prefix); err != nil {
		return "", fmt.Errorf("content prefix: %w", err)
	}
	if !ValidSHA256(sha) {
		return "", fmt.Errorf("%w: %q is not a lowercase hex sha-256", ErrInvalidKey, sha)
	}
	return prefix + "/" + sha, nil
}

// FixturePrefix is the first segment of every fixture key (SPEC §7.2).
const FixturePrefix = "fixtures"

// FixtureKey returns the key of a fixture object, fixtures/<tenant>/<sha>,
// kept apart from every other blob (SPEC §7.2). tenantID must be one key
// segment, as gyre's tenant ids are.
func FixtureKey(tenantID, sha string) (string, error) {
	if strings.Contains(tenantID, "/") {
		return "", fmt.Errorf("%w: tenant id %q contains a slash", ErrInvalidKey, tenantID)
	}
	return KeyFor(FixturePrefix+"/"+tenantID, sha)
}
