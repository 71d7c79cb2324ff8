package grade

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
)

// CommandAllow is one entry of the operator's command allow-list
// (gyre.yaml graders.command.allow): the absolute path of an executable a
// command grader may run, optionally only for some tenants.
type CommandAllow struct {
	// Path is the executable's absolute, clean path. It is compared
	// exactly with a command grader's argv[0]: "python3" or
	// "/usr/bin/../bin/python3" do not match "/usr/bin/python3".
	Path string
	// Tenants allow-lists tenant names; nil or a "*" entry allows every
	// tenant.
	Tenants []string
}

// CommandAllowList is the operator's allow-list of command graders. The
// empty list allows nothing.
type CommandAllowList []CommandAllow

// Validate reports every entry that cannot be matched: a path that is
// not absolute and clean, a path listed twice, an empty tenant name.
func (l CommandAllowList) Validate() error {
	var errs []error
	seen := map[string]int{}
	for i, e := range l {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("graders.command.allow[%d]: %s", i, fmt.Sprintf(format, args...)))
		}
		switch {
		case e.Path == "":
			bad("path is required")
		case !filepath.IsAbs(e.Path):
			bad("%q is not an absolute path: name the executable by its absolute path (e.g. /usr/local/bin/check-refund), which is matched exactly against a command grader's argv[0]", e.Path)
		case filepath.Clean(e.Path) != e.Path:
			bad("%q is not a clean path: write it as %q", e.Path, filepath.Clean(e.Path))
		default:
			if j, dup := seen[e.Path]; dup {
				bad("%q is already listed by graders.command.allow[%d]: list it once with every tenant", e.Path, j)
			}
			seen[e.Path] = i
		}
		for _, t := range e.Tenants {
			if t == "" {
				bad("tenants has an empty entry")
			}
		}
	}
	return errors.Join(errs...)
}

// Allows reports whether a command grader of tenantName may run the
// executable argv0: an entry with exactly that path that allows the
// tenant. Relative names never match, since entries are absolute.
func (l CommandAllowList) Allows(tenantName, argv0 string) bool {
	for _, e := range l {
		if e.Path != argv0 {
			continue
		}
		if e.Tenants == nil || slices.Contains(e.Tenants, "*") || slices.Contains(e.Tenants, tenantName) {
			return true
		}
	}
	return false
}
