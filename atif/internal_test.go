package atif

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidTimestamp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		want bool
	}{
		{"2025-10-11T10:00:00Z", true},
		{"2025-10-11T10:00:00.123Z", true},
		{"2025-10-11T10:00:00.123456Z", true},
		{"2026-06-30T05:11:51.965851+00:00", true},
		{"2026-05-15T10:00:00.123456789-07:30", true},
		{"2025-10-11T10:00:00", true}, // zone-less: Harbor accepts it
		{"2025-10-11 10:00:00", true}, // space separator: Harbor accepts it
		{"2025-10-11T10:00", true},
		{"2025-10-11T10:00Z", true},
		{"2025-10-11", true},
		{"2024-02-29T00:00:00Z", true},
		{"2000-02-29", true},
		{"0001-01-01T00:00:00Z", true},
		{"2025-10-11T23:59:59+23:59", true},
		{"", false},
		{"yesterday", false},
		{"2025-02-29", false},
		{"1900-02-29", false},
		{"2025-04-31", false},
		{"0000-01-01", false},
		{"2025-13-01", false},
		{"2025-10-11T24:00:00Z", false},
		{"2025-10-11T10:60:00Z", false},
		{"2025-10-11T10:00:60Z", false},
		{"2025-10-11t10:00:00z", false},
		{"2025-10-11T10:00:00z", false},
		{"2025-10-11T10", false},
		{"2025-10-11T1000", false},
		{"20251011T100000", false},
		{"2025-W41-6", false},
		{"2025-10-11T10:00:00,5", false},
		{"2025-10-11T10:00:00.", false},
		{"2025-10-11T10:00:00.1234567890Z", false},
		{"2025-10-11T10:00:00+0000", false},
		{"2025-10-11T10:00:00+00", false},
		{"2025-10-11T10:00:00+24:00", false},
		{"2025-10-11T10:00:00+00:00:30", false},
		{"2025-10-11Z", false},
		{"2025-10-11T", false},
		{"2025-10-11T10:00:00Z ", false},
		{"+2025-10-11", false},
		{"2025-1-11", false},
	}
	for _, tt := range tests {
		if got := validTimestamp(tt.s); got != tt.want {
			t.Errorf("validTimestamp(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{"ATIF-v1.0": 0, "ATIF-v1.5": 5, "ATIF-v1.7": 7} {
		if got, ok := parseVersion(s); !ok || got != want {
			t.Errorf("parseVersion(%q) = %d, %v", s, got, ok)
		}
	}
	for _, s := range []string{"", "ATIF-v1.", "ATIF-v1.8", "ATIF-v1.07", "ATIF-v1.-1", "ATIF-v1.+7", "ATIF-v2.0", "atif-v1.7", "1.7", "ATIF-v1.7 "} {
		if n, ok := parseVersion(s); ok {
			t.Errorf("parseVersion(%q) = %d, true", s, n)
		}
	}
}

// TestAcceptedJSON checks the embedded list: a JSON array of distinct
// versions this package knows the rules of, oldest first, initially
// ATIF-v1.0 … ATIF-v1.7. Adding ATIF-v1.8 to the file without teaching the
// validator its rules fails here (and at init).
func TestAcceptedJSON(t *testing.T) {
	t.Parallel()
	var list []string
	if err := json.Unmarshal(AcceptedJSON, &list); err != nil {
		t.Fatal(err)
	}
	if err := checkVersions(list); err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(list, func(a, b string) int {
		x, _ := parseVersion(a)
		y, _ := parseVersion(b)
		return x - y
	}) {
		t.Errorf("atif-accepted.json is not oldest first: %v", list)
	}
	want := []string{"ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4", "ATIF-v1.5", "ATIF-v1.6", "ATIF-v1.7"}
	if !slices.Equal(AcceptedVersions(), want) {
		t.Errorf("AcceptedVersions() = %v, want %v", AcceptedVersions(), want)
	}
	if LatestVersion() != "ATIF-v1.7" {
		t.Errorf("LatestVersion() = %q", LatestVersion())
	}
	if !IsAccepted("ATIF-v1.3") || IsAccepted("ATIF-v1.8") || IsAccepted("") {
		t.Error("IsAccepted disagrees with the list")
	}
	got := AcceptedVersions()
	got[0] = "changed"
	if AcceptedVersions()[0] != "ATIF-v1.0" {
		t.Error("AcceptedVersions returns the package's own slice")
	}
	for _, bad := range []string{`{}`, `[]`, `["ATIF-v1.8"]`, `["ATIF-v1.1","ATIF-v1.1"]`, `[1]`} {
		if _, err := parseAccepted([]byte(bad)); err == nil {
			t.Errorf("parseAccepted(%s) accepted", bad)
		}
	}
}

func TestUnescape(t *testing.T) {
	t.Parallel()
	for _, lit := range []string{
		`"plain"`, `"a\"b\\c\/d\be\ff\ng\rh\ti"`, `"\u0041\u00e9\u4e2d"`, `"\ud83d\ude00"`,
		`"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`, `"\u0000"`,
		`"é\n"`, `"\\u0041"`, `"x\ud800"`,
	} {
		checkUnescape(t, lit)
	}
}

// FuzzUnescape compares the scanner's string decoding with encoding/json's.
func FuzzUnescape(f *testing.F) {
	f.Add(`"\ud83d\ude00\n"`)
	f.Add(`"\u00e9\\\/"`)
	f.Fuzz(func(t *testing.T, lit string) {
		// The validator rejects text that is not UTF-8 before it reads strings.
		if !json.Valid([]byte(lit)) || !utf8.ValidString(lit) || len(lit) < 2 || lit[0] != '"' {
			return
		}
		checkUnescape(t, lit)
	})
}

func checkUnescape(t *testing.T, lit string) {
	t.Helper()
	var want string
	if err := json.Unmarshal([]byte(lit), &want); err != nil {
		t.Fatalf("%s: %v", lit, err)
	}
	s := scanner{data: []byte(lit)}
	if got := s.readString(); got != want || s.pos != len(strings.TrimRight(lit, " \t\r\n")) {
		t.Errorf("readString(%s) = %q (pos %d), want %q", lit, got, s.pos, want)
	}
}
