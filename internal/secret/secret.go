package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// EnvVar is the environment variable that holds the operator's key.
const EnvVar = "GYRE_SECRET_KEY"

// KeyBytes is the length of the operator's key.
const KeyBytes = 32

// Sentinel errors callers branch on.
var (
	// ErrWrongKey: the value was sealed under another key than this one.
	ErrWrongKey = errors.New("sealed under another secret key")
	// ErrCorrupt: the value does not open under this key and context —
	// changed, truncated, or moved from another row.
	ErrCorrupt = errors.New("sealed value does not open: corrupt or moved")
)

// HKDF info strings: one per derived key, versioned with the format.
const (
	infoSeal  = "gyre secret v1: aes-256-gcm seal key"
	infoKeyID = "gyre secret v1: key id"
	kidPrefix = "v1:"
)

// Key seals and opens values under one operator key. It is safe for
// concurrent use.
type Key struct {
	aead cipher.AEAD
	id   string
}

// ParseKey reads the operator's key: 32 bytes as 64 hex digits or as
// base64 (standard or URL alphabet, padded or not). Surrounding spaces
// are ignored; anything else, a passphrase included, is refused.
func ParseKey(s string) (*Key, error) {
	s = strings.TrimSpace(s)
	raw, err := decodeKey(s)
	if err != nil {
		return nil, err
	}
	seal, err := hkdf.Key(sha256.New, raw, nil, infoSeal, KeyBytes)
	if err != nil {
		return nil, fmt.Errorf("derive seal key: %w", err)
	}
	id, err := hkdf.Key(sha256.New, raw, nil, infoKeyID, 8)
	if err != nil {
		return nil, fmt.Errorf("derive key id: %w", err)
	}
	block, err := aes.NewCipher(seal)
	if err != nil {
		return nil, fmt.Errorf("aes: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("gcm: %w", err)
	}
	return &Key{aead: aead, id: kidPrefix + hex.EncodeToString(id)}, nil
}

func decodeKey(s string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("%s is empty: want 32 random bytes as 64 hex digits or base64 (openssl rand -hex 32)", EnvVar)
	}
	if len(s) == 2*KeyBytes {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == KeyBytes {
			return b, nil
		}
	}
	// The message never repeats the value: it is a secret, even a bad one.
	return nil, fmt.Errorf("%s is not 32 bytes as 64 hex digits or base64 (it has %d characters): generate one with openssl rand -hex 32", EnvVar, len(s))
}

// ID names the key: "v1:" and 16 hex digits derived from it, safe to
// store and show (it reveals nothing of the key).
func (k *Key) ID() string { return k.id }

// Seal encrypts plaintext bound to aad with a fresh random nonce and
// returns nonce || ciphertext. Store the result with ID().
func (k *Key) Seal(plaintext, aad []byte) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plaintext)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return k.aead.Seal(nonce, nonce, plaintext, aad), nil
}

// Open decrypts a value Seal returned under the key named kid with the
// same aad: ErrWrongKey when kid is not this key's, ErrCorrupt when the
// value does not authenticate.
func (k *Key) Open(sealed []byte, kid string, aad []byte) ([]byte, error) {
	if kid != k.id {
		return nil, fmt.Errorf("key %q, this server has %q: %w", kid, k.id, ErrWrongKey)
	}
	ns := k.aead.NonceSize()
	if len(sealed) < ns+k.aead.Overhead() {
		return nil, ErrCorrupt
	}
	out, err := k.aead.Open(nil, sealed[:ns], sealed[ns:], aad)
	if err != nil {
		return nil, ErrCorrupt
	}
	return out, nil
}
