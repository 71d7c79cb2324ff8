package storetest

import "testing"

// runTurns runs the conformance tests of the store's turns.
func runTurns(t *testing.T, open Opener) {
}
