package cli

import (
	"errors"
	"testing"
	"time"
)

func TestParseSince_RFC3339OrDurationBeforeNow(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC)
	for _, tc := range []struct {
		in, want string
		usage    bool
	}{
		{"2031-03-01T00:00:00Z", "2031-03-01T00:00:00Z", false},
		{"2031-03-01T02:00:00+02:00", "2031-03-01T02:00:00+02:00", false},
		{"24h", "2031-03-13T15:09:26Z", false},
		{"90m", "2031-03-14T13:39:26Z", false},
		{"0s", "2031-03-14T15:09:26Z", false},
		{"-1h", "", true}, // after now is not "before now"
		{"yesterday", "", true},
		{"2031-03-01", "", true},
	} {
		got, err := parseSince("since", tc.in, now)
		var ue usageError
		if tc.usage {
			if !errors.As(err, &ue) {
				t.Errorf("parseSince(%q) = %q, %v; want a usage error", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseSince(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestClip_OneLineAtMostNCharacters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"two\nlines  and\tspaces", 40, "two lines and spaces"},
		{"héllo wörld", 6, "héllo…"},
		{"", 5, `""`},
	} {
		if got := clip(tc.in, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
