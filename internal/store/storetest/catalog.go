package storetest

import "testing"

// runCatalog runs the conformance tests of the store's catalog.
func runCatalog(t *testing.T, open Opener) {
}
