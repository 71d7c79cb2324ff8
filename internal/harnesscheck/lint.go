package harnesscheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/gyrehq/gyre/harnesskit"
	"github.com/gyrehq/gyre/internal/eval"
	"github.com/gyrehq/gyre/internal/suite"
)

// Severity says whether a lint problem fails the lint.
type Severity string

// The severities of a lint problem: errors fail the lint, warnings do not.
const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Problem is one finding of Lint.
type Problem struct {
	Severity Severity `json:"severity"`
	// File is the file at fault and Line its 1-based line; empty and 0
	// when unknown.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	// Pointer is a JSON Pointer into the (combined) suite document, e.g.
	// /cases/2/input; "" for the whole suite.
	Pointer string `json:"pointer"`
	// CaseID is the case at fault, if any.
	CaseID  string `json:"case_id,omitempty"`
	Message string `json:"message"`
}

// String returns "ERROR file:line: pointer (case id): message", leaving
// out what is unknown.
func (p Problem) String() string {
	var b strings.Builder
	if p.Severity == SeverityError {
		b.WriteString("ERROR ")
	} else {
		b.WriteString("WARN ")
	}
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
		b.WriteString(": ")
	}
	if p.Pointer != "" {
		b.WriteString(p.Pointer)
		if p.CaseID != "" {
			fmt.Fprintf(&b, " (case %s)", p.CaseID)
		}
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return printable(b.String())
}

// LintReport is the outcome of Lint.
type LintReport struct {
	// Path is the suite file or directory linted.
	Path string `json:"path"`
	// Suite is the suite's name, "" when it did not load.
	Suite string `json:"suite"`
	// Cases counts the suite's cases.
	Cases int `json:"cases"`
	// Agent is the harness URL the cases were checked against, nil when
	// none.
	Agent *string `json:"agent"`
	// Problems are the findings, in the order they were found: the suite,
	// its cases, its fixtures, then the cases against the agent.
	Problems []Problem `json:"problems"`
	// Errors and Warnings count Problems by severity.
	Errors   int `json:"errors"`
	Warnings int `json:"warnings"`
}

// Failed reports whether the lint found an error.
func (r LintReport) Failed() bool { return r.Errors > 0 }

// LintConfig configures Lint.
type LintConfig struct {
	// Path is the suite: a YAML, JSON or JSONL file, or a suite directory.
	Path string
	// AgentURL, when set, is the harness whose capabilities the cases are
	// checked against (input_schema, accepts).
	AgentURL string
	// APIKey is sent as x-api-key to AgentURL only.
	APIKey string
	// HTTPClient supplies the transport to the agent; nil uses a default.
	HTTPClient *http.Client
}

// Lint checks a suite: what suite.Load checks (syntax, unknown keys,
// unique case ids, grader configs, fixture names and presence; the first
// such error stops the lint), then every case's graders, and unused
// fixtures. With an AgentURL it fetches the harness's capabilities and
// checks every case input against its input_schema (or the default
// question schema) and whether the case's fixtures can be delivered with
// its accepts. Problems carry a file, line and JSON Pointer where known.
func Lint(ctx context.Context, cfg LintConfig) LintReport {
	rep := LintReport{Path: cfg.Path, Problems: []Problem{}}
	lint(ctx, cfg, &rep)
	for _, p := range rep.Problems {
		if p.Severity == SeverityError {
			rep.Errors++
		} else {
			rep.Warnings++
		}
	}
	return rep
}

// lint adds the problems of the suite cfg names to rep.
func lint(ctx context.Context, cfg LintConfig, rep *LintReport) {
	if cfg.AgentURL != "" {
		rep.Agent = new(cfg.AgentURL)
	}
	lines := newLineFinder(cfg.Path)
	add := func(sev Severity, ptr, caseID, format string, args ...any) {
		file, line := lines.locate(ptr)
		rep.Problems = append(rep.Problems, Problem{Severity: sev, File: file, Line: line, Pointer: ptr, CaseID: caseID, Message: fmt.Sprintf(format, args...)})
	}

	s, err := suite.Load(cfg.Path, suite.Options{})
	if err != nil {
		var se *suite.Error
		if errors.As(err, &se) {
			rep.Problems = append(rep.Problems, Problem{Severity: SeverityError, File: se.File, Line: se.Line, Pointer: se.Pointer, Message: se.Message})
		} else {
			rep.Problems = append(rep.Problems, Problem{Severity: SeverityError, File: cfg.Path, Message: err.Error()})
		}
		return
	}
	rep.Suite, rep.Cases = s.Name, len(s.Cases)

	for _, c := range s.Cases {
		if len(c.Graders) == 0 {
			add(SeverityWarning, c.Pointer, c.ID, "no graders: every run of this case will be unscored")
		}
		decides := false
		for _, g := range c.Graders {
			if !g.Optional {
				decides = true
			}
		}
		if len(c.Graders) > 0 && !decides {
			add(SeverityWarning, c.Pointer+"/graders", c.ID, "every grader is optional: none decides whether a run passes")
		}
		if _, err := c.Compile(); err != nil {
			add(SeverityError, c.Pointer+"/graders", c.ID, "graders do not compile: %v", err)
		}
	}
	lintUnusedFixtures(s, rep)

	if cfg.AgentURL == "" {
		return
	}
	client, err := eval.NewClient(cfg.AgentURL, cfg.APIKey, cfg.HTTPClient, eval.Limits{})
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{Severity: SeverityError, Message: fmt.Sprintf("agent: %v", err)})
		return
	}
	caps, _, err := client.Capabilities(ctx)
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{Severity: SeverityError, Message: fmt.Sprintf("agent %s: %v", cfg.AgentURL, err)})
		return
	}
	if v := caps.Version(); v != harnesskit.ContractVersion {
		rep.Problems = append(rep.Problems, Problem{Severity: SeverityError, Message: fmt.Sprintf("agent %s implements Harness API %q; gyre speaks %s only", cfg.AgentURL, oneLine(v, 40), harnesskit.ContractVersion)})
		return
	}
	schema, err := eval.CompileInputSchema(caps.InputSchema)
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{Severity: SeverityError, Message: fmt.Sprintf("agent %s: %v", cfg.AgentURL, err)})
		return
	}
	what := "the agent's default question schema (it declares no input_schema)"
	if schema.Declared {
		what = "the agent's input_schema"
	}
	var acc harnesskit.Accepts
	if caps.Accepts != nil {
		acc = *caps.Accepts
	}
	for _, c := range s.Cases {
		if err := schema.Check(c.Input); err != nil {
			add(SeverityError, c.Pointer+"/input", c.ID, "input does not pass %s: %v", what, err)
		}
		if len(c.Files) > 0 && !acc.Files && !acc.FileURLs {
			add(SeverityError, c.Pointer+"/files", c.ID, "the agent accepts neither files nor file_urls, so this case's %s cannot be delivered", plural(len(c.Files), "fixture"))
		}
	}
}

// lintUnusedFixtures warns about files in the fixtures directory that no
// case references.
func lintUnusedFixtures(s *suite.Suite, rep *LintReport) {
	if s.FixturesDir == "" {
		return
	}
	entries, err := os.ReadDir(s.FixturesDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if _, used := s.Fixtures[e.Name()]; used {
			continue
		}
		msg := fmt.Sprintf("fixture %q is not used by any case", e.Name())
		if !suite.ValidName(e.Name()) {
			msg = fmt.Sprintf("fixture file %q cannot be used: fixture names match ^[A-Za-z0-9._-]{1,255}$", e.Name())
		}
		rep.Problems = append(rep.Problems, Problem{Severity: SeverityWarning, File: filepath.Join(s.FixturesDir, e.Name()), Message: msg})
	}
}
