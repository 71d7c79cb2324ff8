package main

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/cli"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/mdfence"
	"github.com/gyrehq/gyre/internal/worker/workertest"
)

// TestWalkthrough_CommandsSucceed runs the README walkthrough's gyre admin
// commands (in process, with the server and key the walkthrough exports)
// and sends its curl commands, as curl would send them, to a real gyre
// server configured as the walkthrough's gyre.yaml says, so that the
// walkthrough cannot drift from the CLI or the API: every one must
// succeed.
func TestWalkthrough_CommandsSucceed(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	script := shellBlock(t, string(readme), "## Under gyre worker")
	_, heredocs := shellCommands(script, nil)
	if !strings.Contains(heredocs["gyre.yaml"], "name: openai") {
		t.Fatalf("the walkthrough's gyre.yaml no longer names the upstream openai:\n%s", heredocs["gyre.yaml"])
	}
	srv := workertest.Start(t, workertest.Options{Deps: func(d *api.Deps) {
		gw, err := gateway.New(gateway.Config{Upstreams: []gateway.Upstream{{Name: "openai", BaseURL: "https://api.openai.com/v1"}}},
			gateway.Deps{Store: d.Store, Clock: d.Clock, Logger: d.Logger})
		if err != nil {
			t.Fatal(err)
		}
		d.Gateway = gw
	}})

	// The files the walkthrough writes with heredocs, in a directory of
	// their own.
	dir := t.TempDir()
	for name, body := range heredocs {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{"GYRE_SERVER": srv.URL, "GYRE_KEY": srv.Admin}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	admin := map[string]bool{"policy": true, "suites": true, "tasks": true, "batches": true, "rollouts": true, "turns": true}
	cmds, _ := shellCommands(script, nil)
	ran, exported := 0, false
	for _, argv := range cmds {
		if argv[0] == "export" {
			exported = slices.Contains(argv, "GYRE_KEY_FILE=gyre-data/admin.key") && slices.ContainsFunc(argv, func(w string) bool {
				return strings.HasPrefix(w, "GYRE_SERVER=http://127.0.0.1:7070")
			})
		}
		if argv[0] != "gyre" || len(argv) < 2 || !admin[argv[1]] {
			continue
		}
		args := slices.Clone(argv[1:])
		for i, a := range args {
			if _, ok := heredocs[a]; ok {
				args[i] = filepath.Join(dir, a)
			}
		}
		var stdout, stderr bytes.Buffer
		if code := cli.Run(t.Context(), args, strings.NewReader(""), &stdout, &stderr, lookup); code != cli.ExitOK {
			t.Errorf("%s exited with %d:\n%s%s", strings.Join(argv, " "), code, stdout.String(), stderr.String())
		}
		ran++
	}
	if !exported {
		t.Errorf("the walkthrough no longer exports GYRE_SERVER and GYRE_KEY_FILE=gyre-data/admin.key for its gyre commands")
	}
	if ran < 5 {
		t.Errorf("ran %d gyre admin commands of the walkthrough, want its 5 (policy, suite, batch, two lists)", ran)
	}

	curls, _ := shellCommands(shellBlock(t, string(readme), "### The same over the API with curl"), map[string]string{"ADMIN": srv.Admin})
	sent := 0
	for _, argv := range curls {
		if argv[0] != "curl" {
			continue
		}
		req := curlRequest(t, argv, srv.URL)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Errorf("%s %s (Content-Type %q) answered %d: %s", req.Method, req.URL.Path, req.Header.Get("Content-Type"), resp.StatusCode, body)
		}
		sent++
	}
	if sent < 3 {
		t.Errorf("found %d curl commands in the walkthrough, want its 3 (policy, suite, batch)", sent)
	}
}

// shellBlock returns the first ```sh block after the heading.
func shellBlock(t *testing.T, doc, heading string) string {
	t.Helper()
	b, ok := mdfence.After(doc, heading, "sh")
	if !ok {
		t.Fatalf("README has no sh block under %q", heading)
	}
	return b.Text
}

// shellCommands splits a POSIX shell script into the words of its simple
// commands: comments, quotes, backslash-newline, heredocs (returned by the
// file they are redirected to) and $NAME from env; anything else ($(…),
// operators) is kept as text, which is enough for a walkthrough.
func shellCommands(script string, env map[string]string) ([][]string, map[string]string) {
	var (
		cmds     [][]string
		words    []string
		word     strings.Builder
		inWord   bool
		heredocs = map[string]string{}
		pending  []string // heredoc delimiters awaiting their body
	)
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	expand := func(s string, i int) (string, int) { // s[i] == '$'
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		if v, ok := env[s[i+1:j]]; ok && j > i+1 {
			return v, j
		}
		return "$", i + 1
	}
	s := script
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && s[i+1] == '\n':
			i += 2
		case c == '\\' && i+1 < len(s):
			word.WriteByte(s[i+1])
			inWord = true
			i += 2
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			word.WriteString(s[i+1 : i+1+end])
			inWord = true
			i += end + 2
		case c == '"':
			inWord = true
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '$' {
					v, j := expand(s, i)
					word.WriteString(v)
					i = j
					continue
				}
				word.WriteByte(s[i])
				i++
			}
			i++
		case c == '$':
			v, j := expand(s, i)
			word.WriteString(v)
			inWord = true
			i = j
		case c == '#' && !inWord:
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '<' && strings.HasPrefix(s[i:], "<<") && !inWord:
			i += 2
			j := i
			for j < len(s) && s[j] != '\n' && s[j] != ' ' {
				j++
			}
			pending = append(pending, strings.Trim(s[i:j], `'"`))
			i = j
		case c == '\n':
			target := ""
			for k, w := range words {
				if w == ">" && k+1 < len(words) {
					target = words[k+1]
				}
			}
			endCmd()
			i++
			for _, delim := range pending {
				var body strings.Builder
				for i < len(s) {
					line, rest, _ := strings.Cut(s[i:], "\n")
					i = len(s) - len(rest)
					if line == delim {
						break
					}
					body.WriteString(line + "\n")
				}
				heredocs[target] = body.String()
			}
			pending = nil
		case c == ';' || c == '&' || c == '|':
			endCmd()
			i++
		case c == ' ' || c == '\t':
			endWord()
			i++
		default:
			word.WriteByte(c)
			inWord = true
			i++
		}
	}
	endCmd()
	return cmds, heredocs
}

// curlRequest builds the request curl would send for argv, with the
// URL's host replaced by base. Like curl, -d without a Content-Type
// header sends application/x-www-form-urlencoded.
func curlRequest(t *testing.T, argv []string, base string) *http.Request {
	t.Helper()
	var (
		method, target string
		body           *string
		header         = http.Header{}
	)
	for i := 1; i < len(argv); i++ {
		switch a := argv[i]; a {
		case "-s", "--silent", "-S", "-f", "--fail":
		case "-H", "--header":
			i++
			name, value, _ := strings.Cut(argv[i], ":")
			header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
		case "-d", "--data", "--data-raw":
			i++
			body = &argv[i]
		case "-X", "--request":
			i++
			method = argv[i]
		default:
			if strings.HasPrefix(a, "-") {
				t.Fatalf("curl option %s is not understood by this test: %q", a, argv)
			}
			target = a
		}
	}
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	u, err := url.Parse(target)
	if err != nil || target == "" {
		t.Fatalf("curl without a URL: %q", argv)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader([]byte(*body))
		if method == "" {
			method = http.MethodPost
		}
		if header.Get("Content-Type") == "" {
			header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, base+u.RequestURI(), rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	return req
}
