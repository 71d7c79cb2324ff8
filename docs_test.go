package gyre_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// docFiles are the documents whose links and cited paths are checked:
// README.md, docs/*.md and the examples' READMEs.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Glob("examples/*/README.md")
	return append(append([]string{"README.md"}, docs...), examples...)
}

// repoTree is the repository's tracked files and the directories that
// hold them, by slash path from the root.
type repoTree struct {
	files, dirs map[string]bool
}

func (r repoTree) has(p string) bool { return r.files[p] || r.dirs[p] }

// trackedTree lists the files git tracks (in its index: a new file
// counts once it is added); outside a git checkout it falls back to the
// files on disk.
func trackedTree(t *testing.T) repoTree {
	t.Helper()
	r := repoTree{files: map[string]bool{}, dirs: map[string]bool{}}
	add := func(p string) {
		r.files[p] = true
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			r.dirs[d] = true
		}
	}
	out, err := exec.Command("git", "ls-files", "-z", "--cached").Output()
	if err == nil {
		for _, p := range bytes.Split(out, []byte{0}) {
			if len(p) > 0 {
				add(string(p))
			}
		}
		return r
	}
	t.Logf("git ls-files failed (%v): checking the files on disk instead", err)
	err = filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			add(filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	// mdLink is a Markdown link or image: its target, without a title.
	mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// fence opens or closes a fenced code block.
	fence = regexp.MustCompile("^\\s*(```|~~~)")
	// heading is an ATX heading.
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// htmlAnchor is an explicit anchor: <a id="x"> or <a name="x">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// codeSpan is an inline code span of one backtick.
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
)

// prose returns the lines of a Markdown document outside fenced code
// blocks, with their line numbers.
func prose(doc string) (lines []string, numbers []int) {
	in := false
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			lines = append(lines, l)
			numbers = append(numbers, n)
		}
	}
	return lines, numbers
}

// slug is GitHub's anchor of a heading: lowercased, markup and punctuation
// other than - and _ dropped, spaces made hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors a Markdown document defines: one per
// heading (repeats numbered -1, -2, … as GitHub does) and explicit HTML
// anchors.
func anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	lines, _ := prose(doc)
	for _, l := range lines {
		if m := heading.FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				out[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// TestDocs_RelativeLinksResolve: every relative link in the docs names a
// tracked file or directory of the repository, and its #anchor, if any,
// a heading of the target document (or of the same one for "#…").
func TestDocs_RelativeLinksResolve(t *testing.T) {
	t.Parallel()
	tree := trackedTree(t)
	cache := map[string]map[string]bool{}
	anchorsOf := func(p string) map[string]bool {
		if a, ok := cache[p]; ok {
			return a
		}
		b, err := os.ReadFile(filepath.FromSlash(p))
		if err != nil {
			t.Fatal(err)
		}
		cache[p] = anchors(string(b))
		return cache[p]
	}
	for _, doc := range docFiles(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		lines, numbers := prose(string(b))
		for i, l := range lines {
			// Links inside code spans are text, not links.
			l = codeSpan.ReplaceAllString(l, "")
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				where := fmt.Sprintf("%s:%d", doc, numbers[i])
				p := filepath.ToSlash(doc)
				if file != "" {
					if strings.HasPrefix(file, "/") {
						t.Errorf("%s: link %s is absolute; make it relative to the document", where, target)
						continue
					}
					p = path.Clean(path.Join(path.Dir(filepath.ToSlash(doc)), file))
					if !tree.has(p) {
						t.Errorf("%s: link %s names %s, which is not a tracked file or directory", where, target, p)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(p, ".md") || !tree.files[p] {
					t.Errorf("%s: link %s has an anchor into %s, which is not a Markdown document", where, target, p)
					continue
				}
				if !anchorsOf(p)[anchor] {
					t.Errorf("%s: link %s: %s has no heading with anchor #%s", where, target, p, anchor)
				}
			}
		}
	}
}

// TestDocs_CitedPathsExist: every backticked string in the docs that
// starts with a tracked top-level directory (internal/, cmd/, docs/,
// examples/, scripts/, …) names a tracked file or directory, so that a
// doc cannot point readers at a file that is not there. A trailing :line
// or #anchor is ignored, and a glob must match something.
func TestDocs_CitedPathsExist(t *testing.T) {
	t.Parallel()
	tree := trackedTree(t)
	var top []string
	for d := range tree.dirs {
		if !strings.Contains(d, "/") && !strings.HasPrefix(d, ".") {
			top = append(top, d)
		}
	}
	slices.Sort(top)
	lineSuffix := regexp.MustCompile(`(:\d+(-\d+)?)$`)
	for _, doc := range docFiles(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		lines, numbers := prose(string(b))
		for i, l := range lines {
			for _, m := range codeSpan.FindAllStringSubmatch(l, -1) {
				s := strings.TrimPrefix(strings.TrimSpace(m[1]), "./")
				first, _, ok := strings.Cut(s, "/")
				if !ok || !slices.Contains(top, first) || strings.ContainsAny(s, " \t") {
					continue
				}
				s, _, _ = strings.Cut(s, "#")
				s = strings.TrimSuffix(lineSuffix.ReplaceAllString(s, ""), "/")
				where := fmt.Sprintf("%s:%d", doc, numbers[i])
				if strings.ContainsAny(s, "*?[") {
					if !globMatches(tree, s) {
						t.Errorf("%s: `%s` matches no tracked path", where, m[1])
					}
					continue
				}
				if !tree.has(s) {
					t.Errorf("%s: `%s` is not a tracked file or directory of this repository", where, m[1])
				}
			}
		}
	}
}

// globMatches reports whether a path pattern matches a tracked path.
func globMatches(tree repoTree, pattern string) bool {
	for _, set := range []map[string]bool{tree.files, tree.dirs} {
		for p := range set {
			if ok, _ := path.Match(pattern, p); ok {
				return true
			}
		}
	}
	return false
}

// TestDocs_AnchorsFollowGitHub: a heading's anchor is the one GitHub
// renders, so that the links test accepts exactly the links that work.
func TestDocs_AnchorsFollowGitHub(t *testing.T) {
	t.Parallel()
	doc := "# Top\n\n## `gyre eval regrade ID --graders FILE`\n## 9. Datasets (wave 2)\n" +
		"```sh\n# not a heading\n```\n## Recorded calls, trajectories and blobs\n## Top\n<a id=\"custom\"></a>\n"
	got := anchors(doc)
	for _, want := range []string{"top", "gyre-eval-regrade-id---graders-file", "9-datasets-wave-2",
		"recorded-calls-trajectories-and-blobs", "top-1", "custom"} {
		if !got[want] {
			t.Errorf("no anchor #%s in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a comment in a code block made an anchor")
	}
}
