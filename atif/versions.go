package atif

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// AcceptedJSON is the embedded atif-accepted.json: the JSON array of the
// schema_version values gyre accepts, oldest first. A document whose
// schema_version is missing or not listed is invalid.
//
//go:embed atif-accepted.json
var AcceptedJSON []byte

// The ATIF versions this package knows the rules of, as minor numbers of
// "ATIF-v1.N". A version listed in atif-accepted.json must be known.
const (
	minKnownMinor = 0
	maxKnownMinor = 7
)

// The minor version that introduced each version-dependent field or rule
// (reference/atif.md §5).
const (
	sinceRootExtra          = 1 // root extra
	sinceSystemObservation  = 2 // observation on a system step
	sinceCompletionTokenIDs = 3 // metrics.completion_token_ids
	sincePromptTokenIDs     = 4 // metrics.prompt_token_ids
	sinceV15                = 5 // agent.tool_definitions, root continued_trajectory_ref, step is_copied_context
	sinceContentParts       = 6 // message and result content as ContentPart arrays
	sinceV17                = 7 // trajectory_id, subagent_trajectories, llm_call_count, tool call and result extra; session_id optional
)

// acceptedList is AcceptedJSON decoded, and acceptedSet the same as a set
// (version → minor number). They are package variables initialised before
// defaultValidator, which depends on them.
var (
	acceptedList = mustParseAccepted(AcceptedJSON)
	acceptedSet  = versionSet(acceptedList)
)

func mustParseAccepted(b []byte) []string {
	list, err := parseAccepted(b)
	if err != nil {
		panic(fmt.Sprintf("atif: embedded atif-accepted.json: %v", err))
	}
	return list
}

// versionSet maps each version of a checked list to its minor number.
func versionSet(list []string) map[string]int {
	set := make(map[string]int, len(list))
	for _, v := range list {
		set[v], _ = parseVersion(v)
	}
	return set
}

// parseAccepted decodes an accepted-versions list and checks that it is a
// non-empty list of distinct versions this package knows.
func parseAccepted(b []byte) ([]string, error) {
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("no versions listed")
	}
	if err := checkVersions(list); err != nil {
		return nil, err
	}
	return list, nil
}

func checkVersions(list []string) error {
	seen := make(map[string]bool, len(list))
	for _, v := range list {
		if _, ok := parseVersion(v); !ok {
			return fmt.Errorf("unknown version %q (this package knows ATIF-v1.%d to ATIF-v1.%d)", v, minKnownMinor, maxKnownMinor)
		}
		if seen[v] {
			return fmt.Errorf("version %q listed twice", v)
		}
		seen[v] = true
	}
	return nil
}

// parseVersion returns N for "ATIF-v1.N" when N is a version this package
// knows, written without leading zeros.
func parseVersion(v string) (int, bool) {
	rest, ok := strings.CutPrefix(v, "ATIF-v1.")
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < minKnownMinor || n > maxKnownMinor || strconv.Itoa(n) != rest {
		return 0, false
	}
	return n, true
}

func versionName(minor int) string { return "ATIF-v1." + strconv.Itoa(minor) }

// AcceptedVersions returns the schema_version values of atif-accepted.json,
// oldest first.
func AcceptedVersions() []string { return slices.Clone(acceptedList) }

// IsAccepted reports whether v is listed in atif-accepted.json.
func IsAccepted(v string) bool {
	_, ok := acceptedSet[v]
	return ok
}

// LatestVersion returns the newest accepted schema_version, the one the
// converters write.
func LatestVersion() string { return versionName(latestMinor(acceptedSet)) }

func latestMinor(set map[string]int) int {
	m := -1
	for _, n := range set {
		m = max(m, n)
	}
	return m
}
