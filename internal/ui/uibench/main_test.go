package main

import (
	"strings"
	"testing"
)

// The benchmark signs in and every page it measures answers 200 on a
// seeded store (a failed page is an error, not a time).
func TestEveryMeasuredPageAnswersOnASeededStore(t *testing.T) {
	var out strings.Builder
	if err := measure(t.Context(), &out, options{rollouts: 4, runs: 20, requests: 2}); err != nil {
		t.Fatal(err)
	}
	for _, page := range []string{"/ui/ ", "/ui/batches ", "/ui/rollouts/", "/ui/experiments ", "/ui/compare", "/ui/turns ", "/ui/datasets ", "/ui/policies ", "/ui/promotions ", "/ui/agents/"} {
		if !strings.Contains(out.String(), page) {
			t.Errorf("no line for %s in:\n%s", page, out.String())
		}
	}
}
