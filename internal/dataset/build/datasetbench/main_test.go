package main

import "testing"

// The seeded rollouts are all selected and exported, one sft row each
// (their two completions are one chain), so the benchmark measures a real
// export and not an empty one.
func TestSeededRolloutsAreExportedOneRowEach(t *testing.T) {
	const n = 51 // odd: the last group is cut short
	r, err := measure(t.Context(), n, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Rollouts != n || r.Exported != n || r.Rows != n || r.FileBytes == 0 {
		t.Fatalf("selected %d, exported %d, rows %d, %d bytes (pending %d, left out %v); want %d, %d, %d and a file",
			r.Rollouts, r.Exported, r.Rows, r.FileBytes, r.Pending, r.NotExported, n, n, n)
	}
}
