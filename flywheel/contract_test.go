package flywheel_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

// The embedded contract is the published file, byte for byte.
func TestContract_Pinned(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256(flywheel.ContractJSON)
	if got := hex.EncodeToString(sum[:]); got != flywheel.ContractSHA256 {
		t.Fatalf("flywheel-1.json SHA-256 = %s, want %s: the contract file must never be edited", got, flywheel.ContractSHA256)
	}
	if flywheel.ContractSHA256 != "073b637482a7ffb86d0cc4c1a6065135b72d2003e388cd7d9df914dd98f334be" {
		t.Fatal("ContractSHA256 changed")
	}
}

func TestContract_Metadata(t *testing.T) {
	t.Parallel()
	c := contract(t)
	if c["$id"] != flywheel.SchemaID {
		t.Errorf("$id = %v, want %s", c["$id"], flywheel.SchemaID)
	}
	if c["x-contract-version"] != flywheel.ContractVersion {
		t.Errorf("x-contract-version = %v, want %s", c["x-contract-version"], flywheel.ContractVersion)
	}
	if c["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v, want draft 2020-12", c["$schema"])
	}
}

// Defs names exactly the contract's $defs.
func TestContract_DefsMatchSchema(t *testing.T) {
	t.Parallel()
	defs := contract(t)["$defs"].(map[string]any)
	want := slices.Sorted(maps.Keys(defs))
	var got []string
	for _, d := range flywheel.Defs {
		got = append(got, string(d))
		if !d.Valid() {
			t.Errorf("%s.Valid() = false", d)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Defs = %v, want the contract's $defs %v", got, want)
	}
	if flywheel.Def("Nope").Valid() {
		t.Error(`Def("Nope").Valid() = true`)
	}
}

func TestNewValidator_Compiles(t *testing.T) {
	t.Parallel()
	if _, err := flywheel.NewValidator(); err != nil {
		t.Fatal(err)
	}
	if _, err := flywheel.Default(); err != nil {
		t.Fatal(err)
	}
}

// contract returns the embedded contract decoded with encoding/json.
func contract(t testing.TB) map[string]any {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal(flywheel.ContractJSON, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// defSchema returns one $defs entry.
func defSchema(t testing.TB, def string) map[string]any {
	t.Helper()
	return contract(t)["$defs"].(map[string]any)[def].(map[string]any)
}
