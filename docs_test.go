package gyre_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// mdLink is a relative Markdown link target.
	mdLink = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	// codePath is a backticked path of a repository file, e.g.
	// `flywheel/flywheel-1.json` or `internal/grade/reduce.go`.
	codePath = regexp.MustCompile("`([a-z][a-z0-9_-]*/[A-Za-z0-9_./-]+\\.(?:json|go|md|sql|yaml|txtar|sh))`")
)

// TestDocs_CitedPathsExist checks that every file the docs cite — a
// relative link, or a backticked path (from the repository's root or the
// doc's directory) such as a contract's — exists in this repository, so that a doc cannot point readers at a file
// that is not there.
func TestDocs_CitedPathsExist(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Glob("examples/*/README.md")
	docs = append(append(docs, "README.md"), examples...)
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", doc, target)
			}
		}
		for _, m := range codePath.FindAllStringSubmatch(string(b), -1) {
			_, errRoot := os.Stat(m[1])
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), m[1])); err != nil && errRoot != nil {
				t.Errorf("%s cites `%s`, which is not a path of this repository", doc, m[1])
			}
		}
	}
}
