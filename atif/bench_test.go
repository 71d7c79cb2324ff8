package atif_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gyrehq/gyre/atif"
)

// BenchmarkValidate checks the largest valid sample (OpenClaw, 62 steps,
// 220 kB).
func BenchmarkValidate(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "valid", "nat-harbor-openclaw-smoke__native-openclaw-trajectory.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if r := atif.Check(data); !r.Valid() {
			b.Fatal(r.Err())
		}
	}
}
