package flywheel_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

func TestArtifact_JSON(t *testing.T) {
	t.Parallel()
	in := `{"d":"` + sha64 + `","i":{"sha256":"` + sha64 + `","size_bytes":1.0,"content":"4"}}`
	var m map[string]flywheel.Artifact
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	if m["d"].IsInline() || m["d"].Digest != sha64 {
		t.Errorf("digest form decoded as %+v", m["d"])
	}
	if !m["i"].IsInline() || m["i"].Inline.Content != "4" || m["i"].Inline.SizeBytes != 1 {
		t.Errorf("inline form decoded as %+v", m["i"])
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(in, "1.0", "1", 1); string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	for _, bad := range []string{`1`, `null`, `[]`, `true`} {
		var a flywheel.Artifact
		if err := json.Unmarshal([]byte(bad), &a); err == nil && bad != "null" {
			t.Errorf("decoded %s as %+v", bad, a)
		}
	}
}

// SPEC §4.6: string values are digests or skip markers; inline bodies hash
// and measure to what they claim.
func TestArtifact_Verify(t *testing.T) {
	t.Parallel()
	good := flywheel.InlineArtifactOf("héllo\n")
	if good.Inline.SizeBytes != 7 {
		t.Errorf("size = %d, want 7 UTF-8 bytes", good.Inline.SizeBytes)
	}
	tests := []struct {
		name string
		a    flywheel.Artifact
		ok   bool
	}{
		{"digest", flywheel.DigestArtifact(sha64), true},
		{"skip marker", flywheel.DigestArtifact("skipped:binary"), true},
		{"skip marker with size", flywheel.DigestArtifact("skipped:too_large:1048576"), true},
		{"inline", good, true},
		{"uppercase digest", flywheel.DigestArtifact(strings.ToUpper(sha64)), false},
		{"short digest", flywheel.DigestArtifact(sha64[:63]), false},
		{"bad skip marker", flywheel.DigestArtifact("skipped:Too-Large"), false},
		{"skip marker with text size", flywheel.DigestArtifact("skipped:too_large:big"), false},
		{"empty", flywheel.DigestArtifact(""), false},
		{"wrong size", flywheel.Artifact{Inline: &flywheel.InlineArtifact{SHA256: good.Inline.SHA256, SizeBytes: 6, Content: good.Inline.Content}}, false},
		{"wrong hash", flywheel.Artifact{Inline: &flywheel.InlineArtifact{SHA256: sha64, SizeBytes: 7, Content: good.Inline.Content}}, false},
		{"not UTF-8", flywheel.InlineArtifactOf("\xff"), false},
	}
	for _, tt := range tests {
		if err := tt.a.Verify(); (err == nil) != tt.ok {
			t.Errorf("%s: Verify() = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestOutcome_Landed(t *testing.T) {
	t.Parallel()
	if l := flywheel.OutcomeOK.Landed(); l == nil || !*l {
		t.Error("ok does not map to true")
	}
	if l := flywheel.OutcomeFailed.Landed(); l == nil || *l {
		t.Error("failed does not map to false")
	}
	if l := flywheel.OutcomeUnknown.Landed(); l != nil {
		t.Error("unknown must map to null, never be rounded up")
	}
	for _, o := range flywheel.Outcomes {
		if !o.Valid() {
			t.Errorf("%s.Valid() = false", o)
		}
	}
	if flywheel.Outcome("success").Valid() || flywheel.ExclusionReason("x").Valid() || flywheel.EntityKey("name").Valid() {
		t.Error("Valid accepted a value outside the contract")
	}
}

func TestRolloutOutput_OmittedCountDefaultsToZero(t *testing.T) {
	t.Parallel()
	var o flywheel.RolloutOutput
	if o.OmittedCount() != 0 {
		t.Error("absent count is not 0")
	}
	n := 3
	o.ToolCallsOmittedCount = &n
	if o.OmittedCount() != 3 {
		t.Error("count not read")
	}
}
