package storetest

import "testing"

// runRollouts runs the conformance tests of the store's rollouts.
func runRollouts(t *testing.T, open Opener) {
}
