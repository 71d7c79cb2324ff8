package harnesscheck

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gyrehq/gyre/atif"
	"github.com/gyrehq/gyre/internal/eval"
)

// maxFetchedFiles is how many workspace files the workspace check fetches.
const maxFetchedFiles = 3

// checkTrajectory fetches the run check's trajectory and validates it as
// ATIF (SPEC §7.4).
func (k *checker) checkTrajectory(ctx context.Context) {
	switch {
	case !k.provides().Trajectory:
		k.set(CheckTrajectory, Skip, "provides.trajectory is false")
		return
	case k.main == nil:
		k.set(CheckTrajectory, Skip, "no run to fetch it for (see the run check)")
		return
	case k.main.final == nil:
		k.set(CheckTrajectory, Skip, "run %s did not reach a terminal status", k.main.id)
		return
	}
	a, err := k.c.do(ctx, request{op: opTrajectory, path: runPath(k.main.id) + "/trajectory", limit: MaxTrajectoryBytes, download: true})
	if err != nil {
		k.set(CheckTrajectory, Fail, "%v", err)
		return
	}
	if _, err := k.c.expect(k.ct, opTrajectory, a); err != nil {
		k.set(CheckTrajectory, Fail, "%v", err)
		return
	}
	res := atif.Check(a.body)
	if !res.Valid() {
		n := len(res.Violations) + res.Omitted
		var first []string
		for i, v := range res.Violations {
			if i == maxViolations {
				break
			}
			first = append(first, v.String())
		}
		k.set(CheckTrajectory, Fail, "run %s's trajectory is not valid ATIF (%d violations): %s", k.main.id, n, oneLine(strings.Join(first, "; "), 600))
		return
	}
	steps := 0
	if res.Trajectory != nil {
		steps = len(res.Trajectory.Steps)
	}
	k.set(CheckTrajectory, Pass, "run %s's trajectory is valid %s with %d steps", k.main.id, res.SchemaVersion, steps)
}

// pathProblem says why a listed workspace path breaks the contract
// (workspace-relative: not absolute, no ".." segment; fail) or cannot be
// fetched by gyre eval (warn); "" when it is fine.
func pathProblem(p string) (fail, warn string) {
	isAbs := strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) ||
		(len(p) >= 2 && p[1] == ':' && (p[0]|0x20 >= 'a' && p[0]|0x20 <= 'z'))
	if isAbs {
		return "is absolute", ""
	}
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == ".." {
			return "has a .. segment", ""
		}
	}
	if _, err := eval.WorkspacePath(p); err != nil {
		return "", fmt.Sprintf("gyre eval will not fetch it: %v", err)
	}
	return "", ""
}

// checkWorkspace lists the run check's workspace, requires every path
// (and every artifact path) to be workspace-relative, and fetches a few
// files to compare their sizes with the listing.
func (k *checker) checkWorkspace(ctx context.Context) {
	switch {
	case !k.provides().Workspace:
		k.set(CheckWorkspace, Skip, "provides.workspace is false")
		return
	case k.main == nil:
		k.set(CheckWorkspace, Skip, "no run to list the workspace of (see the run check)")
		return
	}
	id := k.main.id
	a, err := k.c.do(ctx, request{op: opFiles, path: runPath(id) + "/files", limit: MaxStatusBytes})
	if err != nil {
		k.set(CheckWorkspace, Fail, "%v", err)
		return
	}
	if _, err := k.c.expect(k.ct, opFiles, a); err != nil {
		k.set(CheckWorkspace, Fail, "%v", err)
		return
	}
	var list struct {
		Files []struct {
			Path string `json:"path"`
			Size int64  `json:"size"`
		} `json:"files"`
	}
	if err := json.Unmarshal(a.body, &list); err != nil {
		k.set(CheckWorkspace, Fail, "GET /runs/{run_id}/files answer is not a FileList: %v", err)
		return
	}
	var fails, warns []string
	seen := map[string]bool{}
	var fetchable []int
	for i, f := range list.Files {
		if fail, warn := pathProblem(f.Path); fail != "" {
			fails = append(fails, fmt.Sprintf("listed path %q %s: the contract says workspace-relative", oneLine(f.Path, 120), fail))
			continue
		} else if warn != "" {
			warns = append(warns, fmt.Sprintf("listed path %q: %s", oneLine(f.Path, 120), warn))
			continue
		}
		switch {
		case f.Size < 0:
			fails = append(fails, fmt.Sprintf("listed path %q has a negative size", oneLine(f.Path, 120)))
		case seen[f.Path]:
			warns = append(warns, fmt.Sprintf("path %q is listed twice", oneLine(f.Path, 120)))
		case f.Size > MaxFileBytes:
			warns = append(warns, fmt.Sprintf("%q is over the %s gyre eval fetches of one file", oneLine(f.Path, 120), size(MaxFileBytes)))
		default:
			fetchable = append(fetchable, i)
		}
		seen[f.Path] = true
	}
	if len(list.Files) > MaxFiles {
		warns = append(warns, fmt.Sprintf("%d files listed; gyre eval fetches at most %d per run", len(list.Files), MaxFiles))
	}
	if k.main.final != nil {
		for _, art := range k.main.final.Artifacts {
			if art.Path == nil {
				continue
			}
			if fail, _ := pathProblem(*art.Path); fail != "" {
				fails = append(fails, fmt.Sprintf("artifact %q has path %q, which %s: the contract says a workspace path", oneLine(art.Name, 80), oneLine(*art.Path, 120), fail))
			}
		}
	}
	fetched := 0
	for _, i := range fetchable {
		if fetched == maxFetchedFiles || len(fails) > 0 {
			break
		}
		f := list.Files[i]
		escaped, _ := eval.WorkspacePath(f.Path)
		fa, err := k.c.do(ctx, request{op: opFile, path: runPath(id) + "/files/" + escaped, limit: MaxFileBytes, download: true})
		if err != nil {
			fails = append(fails, err.Error())
			break
		}
		// The body is bytes of any kind: validate status and Content-Type.
		head := *fa
		head.body = nil
		if _, err := k.c.expect(k.ct, opFile, &head); err != nil {
			fails = append(fails, fmt.Sprintf("%q: %v", oneLine(f.Path, 120), err))
			break
		}
		if int64(len(fa.body)) != f.Size {
			fails = append(fails, fmt.Sprintf("GET /runs/{run_id}/files/%s served %d bytes; the listing says %d", oneLine(escaped, 120), len(fa.body), f.Size))
			break
		}
		fetched++
	}
	switch {
	case len(fails) > 0:
		k.set(CheckWorkspace, Fail, "run %s: %s", id, strings.Join(capList(fails), "; "))
	case len(warns) > 0:
		k.set(CheckWorkspace, Warn, "run %s: %s", id, strings.Join(capList(warns), "; "))
	case len(list.Files) == 0:
		k.set(CheckWorkspace, Pass, "run %s's workspace listing is empty", id)
	default:
		k.set(CheckWorkspace, Pass, "run %s lists %s, all workspace-relative; %d fetched with the listed sizes", id, plural(len(list.Files), "file"), fetched)
	}
}

// capList keeps the first maxViolations entries and counts the rest.
func capList(s []string) []string {
	if len(s) <= maxViolations {
		return s
	}
	return append(s[:maxViolations:maxViolations], fmt.Sprintf("and %d more", len(s)-maxViolations))
}

// plural returns "1 file" or "n files".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
