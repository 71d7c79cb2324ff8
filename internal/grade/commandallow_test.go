package grade

import (
	"strings"
	"testing"
)

func TestCommandAllowList_MatchesAbsolutePathExactlyPerTenant(t *testing.T) {
	t.Parallel()
	l := CommandAllowList{
		{Path: "/usr/local/bin/check-refund"},
		{Path: "/opt/graders/score", Tenants: []string{"acme"}},
		{Path: "/opt/graders/any", Tenants: []string{"*"}},
	}
	for _, tc := range []struct {
		name, tenant, argv0 string
		want                bool
	}{
		{"listed for every tenant", "globex", "/usr/local/bin/check-refund", true},
		{"listed for the tenant", "acme", "/opt/graders/score", true},
		{"listed for another tenant", "globex", "/opt/graders/score", false},
		{"star allows every tenant", "globex", "/opt/graders/any", true},
		{"bare name does not match", "acme", "check-refund", false},
		{"relative path does not match", "acme", "./check-refund", false},
		{"unclean spelling does not match", "acme", "/usr/local/bin/../bin/check-refund", false},
		{"prefix does not match", "acme", "/usr/local/bin/check-refund2", false},
		{"not listed", "acme", "/usr/bin/python3", false},
		{"empty argv0", "acme", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := l.Allows(tc.tenant, tc.argv0); got != tc.want {
				t.Errorf("Allows(%q, %q) = %v, want %v", tc.tenant, tc.argv0, got, tc.want)
			}
		})
	}
	if (CommandAllowList{}).Allows("acme", "/bin/true") {
		t.Error("the empty list allows a command")
	}
}

func TestCommandAllowList_ValidateRefusesRelativeAndUncleanPaths(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		l    CommandAllowList
		want string // "" = valid
	}{
		{"absolute", CommandAllowList{{Path: "/usr/bin/python3", Tenants: []string{"acme"}}}, ""},
		{"bare name", CommandAllowList{{Path: "python3"}}, "not an absolute path"},
		{"relative", CommandAllowList{{Path: "bin/check"}}, "not an absolute path"},
		{"dot relative", CommandAllowList{{Path: "./check"}}, "not an absolute path"},
		{"empty", CommandAllowList{{Path: ""}}, "path is required"},
		{"unclean", CommandAllowList{{Path: "/usr/bin/../bin/python3"}}, "not a clean path"},
		{"trailing slash", CommandAllowList{{Path: "/usr/bin/check/"}}, "not a clean path"},
		{"listed twice", CommandAllowList{{Path: "/bin/check"}, {Path: "/bin/check"}}, "already listed"},
		{"empty tenant", CommandAllowList{{Path: "/bin/check", Tenants: []string{""}}}, "empty entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.l.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCommand_AllowListAskedWithSubjectEachRun(t *testing.T) {
	t.Parallel()
	// The allow-list is read when the grader runs, so an entry removed
	// after a suite was accepted stops the command.
	l := CommandAllowList{{Path: "/bin/sh", Tenants: []string{"acme"}}}
	env := Env{
		Subject:      Subject{TenantName: "acme"},
		AllowCommand: func(s Subject, argv []string) bool { return l.Allows(s.TenantName, argv[0]) },
	}
	decl := `{"command":{"run":["/bin/sh","-c","echo '{\"pass\":true}'"]}}`
	if got := outcomeOf(gradeOne(t, decl, rollout("x", nil), env)); got != "pass" {
		t.Fatalf("allowed: got %s", got)
	}
	other := env
	other.Subject = Subject{TenantName: "globex"}
	if got := outcomeOf(gradeOne(t, decl, rollout("x", nil), other)); got != "abstain:grader_not_allowed" {
		t.Errorf("other tenant: got %s", got)
	}
	l = nil
	if got := outcomeOf(gradeOne(t, decl, rollout("x", nil), env)); got != "abstain:grader_not_allowed" {
		t.Errorf("entry removed: got %s", got)
	}
}
