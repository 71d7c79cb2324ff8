package harnesskit_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/gyrehq/gyre/harnesskit"
)

func TestContract_Pinned(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256(harnesskit.ContractJSON)
	if got := hex.EncodeToString(sum[:]); got != harnesskit.ContractSHA256 {
		t.Fatalf("harness-api-v1.json SHA-256 = %s, want %s: the contract file must never be edited", got, harnesskit.ContractSHA256)
	}
	if harnesskit.ContractSHA256 != "1969e5c5ec9e7e5d79ef66df4cf07d19aa3c6e34df7244f1a3e19df3e6a93da2" {
		t.Fatal("ContractSHA256 changed")
	}
	c := openapi(t)
	if c["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v", c["openapi"])
	}
	if v := c["info"].(map[string]any)["version"]; v != harnesskit.ContractVersion {
		t.Errorf("info.version = %v, want %s", v, harnesskit.ContractVersion)
	}
}

func openapi(t *testing.T) map[string]any {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal(harnesskit.ContractJSON, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func componentSchemas(t *testing.T) map[string]any {
	t.Helper()
	return openapi(t)["components"].(map[string]any)["schemas"].(map[string]any)
}
