package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
)

// KeyPrefix starts every key gyre issues, so that keys are easy to spot in
// secret scanners and easy to tell apart from other tokens.
const KeyPrefix = "gyre_"

// keyBytes is the amount of randomness in a key: 256 bits.
const keyBytes = 32

// keyLen is the length of a well-formed key.
var keyLen = len(KeyPrefix) + base64.RawURLEncoding.EncodedLen(keyBytes)

// NewKey mints a key: KeyPrefix and the base64url (unpadded) form of 32
// bytes from crypto/rand. It returns the secret and its SHA-256; store the
// hash, show the secret once.
func NewKey() (secret string, hash [32]byte, err error) {
	var b [keyBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", hash, fmt.Errorf("read random bytes: %w", err)
	}
	secret = KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, Hash(secret), nil
}

// Hash is the SHA-256 of a key, the only form in which keys are stored.
func Hash(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// Equal compares two key hashes in constant time.
func Equal(a, b [32]byte) bool { return subtle.ConstantTimeCompare(a[:], b[:]) == 1 }

// WellFormed reports whether s has the shape of a key gyre issues: the
// prefix followed by exactly 43 base64url characters. It checks shape only,
// so that garbage is refused without a store lookup.
func WellFormed(s string) bool {
	if len(s) != keyLen || !strings.HasPrefix(s, KeyPrefix) {
		return false
	}
	for i := len(KeyPrefix); i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// ParseBearer extracts the key from an Authorization header value of the
// form "Bearer <key>" (the scheme is case-insensitive, RFC 9110 §11.1). It
// reports false when the value is empty or malformed, including a key that
// does not have the shape of a gyre key.
func ParseBearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	if !WellFormed(token) {
		return "", false
	}
	return token, true
}
