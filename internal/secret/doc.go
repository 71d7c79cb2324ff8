// Package secret seals the secrets gyre must send again later — a
// registered harness's API key (SPEC §4.8) — so that the store never holds
// them in clear.
//
// The operator's GYRE_SECRET_KEY is 32 random bytes, written as 64 hex
// digits or in base64 (standard or URL alphabet, padded or not): `openssl
// rand -hex 32`. It is never used directly: HKDF-SHA256 derives from it the
// AES-256-GCM key that seals values and, apart, a key id ("v1:" and 16 hex
// digits) stored next to each sealed value, so that a value sealed under
// another key is refused as such instead of failing as corrupt, and a
// later rotation can tell which values an old key sealed. Each value gets
// a fresh random 96-bit nonce, stored in front of its ciphertext, and is
// bound to its context (the caller's additional data: tenant and row), so
// a sealed value copied to another row does not open.
package secret
