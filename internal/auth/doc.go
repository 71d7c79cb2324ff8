// Package auth issues, hashes and checks gyre's API keys (SPEC §3).
//
// A key is "gyre_" followed by the unpadded base64url form of 32 bytes from
// crypto/rand (256 bits). Only its SHA-256 is ever stored; a request's key
// is hashed and looked up through the store for every request, so a revoked
// key stops working at once. Concurrent requests with one key share a
// lookup, but only one that starts after they arrive. The secret never appears in a log line or an
// error message: errors name the problem ("unknown API key"), never the key.
//
// Authenticate turns a request's "Authorization: Bearer <key>" header into
// a Principal; Middleware puts it in the request context, where Require and
// RequireAgent check the role and the agent allow-list. Failures are
// *gyre.Error values: 401 unauthorized for a missing, malformed, unknown or
// revoked key, 403 forbidden for a valid key that may not do the thing.
package auth
