package harnesscheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"

	"github.com/gyrehq/gyre/harnesskit"
)

// op is one operation of Harness API v1: a method and the contract's path
// template.
type op struct {
	method, tmpl string
	// declared is the success status the contract declares for it.
	declared int
}

// The operations the checks call.
var (
	opCapabilities = op{http.MethodGet, "/capabilities", http.StatusOK}
	opCreateRun    = op{http.MethodPost, "/runs", http.StatusCreated}
	opListRuns     = op{http.MethodGet, "/runs", http.StatusOK}
	opRunStatus    = op{http.MethodGet, "/runs/{run_id}", http.StatusOK}
	opStop         = op{http.MethodPost, "/runs/{run_id}/stop", http.StatusOK}
	opTrajectory   = op{http.MethodGet, "/runs/{run_id}/trajectory", http.StatusOK}
	opFiles        = op{http.MethodGet, "/runs/{run_id}/files", http.StatusOK}
	opFile         = op{http.MethodGet, "/runs/{run_id}/files/{path}", http.StatusOK}
)

// String returns "GET /runs/{run_id}".
func (o op) String() string { return o.method + " " + o.tmpl }

// contract validates a harness's answers against the embedded OpenAPI
// document (harnesskit.ContractJSON) with libopenapi-validator, format
// assertions on.
type contract struct {
	mu sync.Mutex // libopenapi-validator's caches are not documented as safe for concurrent use
	v  validator.Validator
}

// loadContract builds the validator once per process: parsing the
// document is the expensive part.
var loadContract = sync.OnceValues(func() (*contract, error) {
	doc, err := libopenapi.NewDocument(harnesskit.ContractJSON)
	if err != nil {
		return nil, fmt.Errorf("parse harness contract: %w", err)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		return nil, fmt.Errorf("build harness contract validator: %w", errors.Join(errs...))
	}
	return &contract{v: v}, nil
})

// maxViolations bounds the violations one message lists.
const maxViolations = 5

// validate checks one answer to o: status, Content-Type and body against
// the operation's declared response. The request is rebuilt from the
// template, so nested workspace paths and odd run ids match it.
func (c *contract) validate(o op, status int, header http.Header, body []byte) error {
	path := strings.NewReplacer("{run_id}", "run", "{path}", "file").Replace(o.tmpl)
	req, err := http.NewRequest(o.method, "http://harness.invalid"+path, nil)
	if err != nil {
		return fmt.Errorf("build validation request: %w", err)
	}
	resp := &http.Response{
		StatusCode: status,
		Status:     strconv.Itoa(status) + " " + http.StatusText(status),
		Header:     header.Clone(),
		Body:       io.NopCloser(bytes.NewReader(body)),
		Request:    req,
	}
	if resp.Header == nil {
		resp.Header = http.Header{}
	}
	c.mu.Lock()
	ok, errs := c.v.ValidateHttpResponse(req, resp)
	c.mu.Unlock()
	if ok {
		return nil
	}
	var msgs []string
	for _, e := range errs {
		if len(e.SchemaValidationErrors) == 0 {
			m := e.Message
			if e.Reason != "" && !strings.Contains(m, e.Reason) {
				m += ": " + e.Reason
			}
			msgs = append(msgs, m)
			continue
		}
		for _, se := range e.SchemaValidationErrors {
			loc := ""
			for _, tok := range se.InstancePath {
				loc += "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(tok)
			}
			if loc == "" {
				msgs = append(msgs, se.Reason)
			} else {
				msgs = append(msgs, loc+": "+se.Reason)
			}
		}
	}
	if len(msgs) == 0 {
		msgs = append(msgs, "does not match the contract")
	}
	more := ""
	if len(msgs) > maxViolations {
		more = fmt.Sprintf(" (and %d more)", len(msgs)-maxViolations)
		msgs = msgs[:maxViolations]
	}
	return fmt.Errorf("%s answer breaks the contract: %s%s", o, oneLine(strings.Join(msgs, "; "), 600), more)
}

// printable replaces control characters (C0, DEL, C1) and invalid UTF-8
// with U+FFFD, so that text a harness sent cannot drive a terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			return utf8.RuneError
		}
		return r
	}, s)
}

// oneLine collapses whitespace and caps s at n bytes (on a rune boundary).
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
