package flywheel

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"unicode/utf8"
)

// Artifact is one value of RolloutOutput.Artifacts, which the contract lets
// take two forms. The string form is the file's SHA-256 digest, or a named
// skip marker such as "skipped:too_large:N". The object form additionally
// inlines the body of a small UTF-8 file, so that a grader can read the
// deliverable rather than only verify its digest.
//
// Exactly one form is set: Inline when non-nil, Digest otherwise.
type Artifact struct {
	// Digest is the string form: a lowercase hex SHA-256 or a skip marker.
	Digest string
	// Inline is the object form.
	Inline *InlineArtifact
}

// InlineArtifact is the object form of an Artifact.
type InlineArtifact struct {
	// SHA256 is the lowercase hex SHA-256 of Content's UTF-8 bytes.
	SHA256 string `json:"sha256"`
	// SizeBytes is the length of Content in bytes (≥ 0).
	SizeBytes int64 `json:"size_bytes"`
	// Content is the file's body.
	Content string `json:"content"`
}

// UnmarshalJSON decodes a, accepting any integral number for SizeBytes.
func (a *InlineArtifact) UnmarshalJSON(b []byte) error {
	type plain InlineArtifact
	aux := struct {
		*plain
		SizeBytes *json.RawMessage `json:"size_bytes"`
	}{plain: (*plain)(a)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	if aux.SizeBytes != nil && !bytes.Equal(*aux.SizeBytes, []byte("null")) {
		n, err := decodeInt(*aux.SizeBytes)
		if err != nil {
			return err
		}
		a.SizeBytes = n
	}
	return nil
}

// DigestArtifact returns the string form of an artifact.
func DigestArtifact(digest string) Artifact { return Artifact{Digest: digest} }

// InlineArtifactOf returns the object form of an artifact whose body is
// content, with its digest and size filled in.
func InlineArtifactOf(content string) Artifact {
	sum := sha256.Sum256([]byte(content))
	return Artifact{Inline: &InlineArtifact{
		SHA256:    hex.EncodeToString(sum[:]),
		SizeBytes: int64(len(content)),
		Content:   content,
	}}
}

// IsInline reports whether a is the object form.
func (a Artifact) IsInline() bool { return a.Inline != nil }

// MarshalJSON writes the object form when Inline is set, the string form
// otherwise.
func (a Artifact) MarshalJSON() ([]byte, error) {
	if a.Inline != nil {
		return marshal(a.Inline)
	}
	return marshal(a.Digest)
}

// UnmarshalJSON reads either form; any other JSON type is an error.
func (a *Artifact) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return errors.New("flywheel: empty artifact")
	}
	switch b[0] {
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = Artifact{Digest: s}
		return nil
	case '{':
		var in InlineArtifact
		if err := json.Unmarshal(b, &in); err != nil {
			return err
		}
		*a = Artifact{Inline: &in}
		return nil
	}
	return fmt.Errorf("flywheel: an artifact is a string or an object, not %s", truncate(b))
}

var (
	digestRE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	skipMarkerRE = regexp.MustCompile(`^skipped:[a-z_]+(:[0-9]+)?$`)
)

// Verify applies gyre's intake rules for artifacts (SPEC §4.6), which go
// beyond the schema: a string value is a lowercase hex SHA-256 or a skip
// marker ("skipped:<reason>" or "skipped:<reason>:<n>"), and an inline
// body's UTF-8 bytes hash to its sha256 and number its size_bytes.
func (a Artifact) Verify() error {
	if a.Inline == nil {
		if digestRE.MatchString(a.Digest) || skipMarkerRE.MatchString(a.Digest) {
			return nil
		}
		return errors.New("must be a lowercase hex SHA-256 digest or a skip marker such as skipped:too_large:1048576")
	}
	in := a.Inline
	if !utf8.ValidString(in.Content) {
		return errors.New("inline content must be UTF-8")
	}
	if int64(len(in.Content)) != in.SizeBytes {
		return fmt.Errorf("size_bytes is %d but the content has %d bytes", in.SizeBytes, len(in.Content))
	}
	sum := sha256.Sum256([]byte(in.Content))
	if hex.EncodeToString(sum[:]) != in.SHA256 {
		return errors.New("sha256 does not match the SHA-256 of the content's UTF-8 bytes")
	}
	return nil
}
