// Package harnesskittest checks HTTP responses against the Harness API v1
// contract, for tests of a harness (built with harnesskit or not) and of
// the kit itself.
//
// A Validator validates each response of an operation the contract declares
// against the embedded OpenAPI document with libopenapi-validator, format
// assertions on. A status the contract does not declare for the operation
// must be an error (4xx or 5xx) answered in gyre's error shape,
// {"error":{"code","message"}}, which is what harnesskit sends.
package harnesskittest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"

	"github.com/gyrehq/gyre/harnesskit"
)

// Validator validates responses against the embedded Harness API v1
// contract. It is safe for concurrent use.
type Validator struct {
	mu sync.Mutex // libopenapi-validator's caches are not documented as concurrency-safe
	v  validator.Validator
	// declared lists, per "METHOD /template", the status codes the contract
	// declares.
	declared map[string][]string
}

// New builds a Validator from harnesskit.ContractJSON.
func New() (*Validator, error) {
	doc, err := libopenapi.NewDocument(harnesskit.ContractJSON)
	if err != nil {
		return nil, fmt.Errorf("harnesskittest: parse contract: %w", err)
	}
	v, errs := validator.NewValidator(doc, config.WithFormatAssertions())
	if len(errs) > 0 {
		return nil, fmt.Errorf("harnesskittest: build validator: %w", errors.Join(errs...))
	}
	var raw struct {
		Paths map[string]map[string]struct {
			Responses map[string]json.RawMessage `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(harnesskit.ContractJSON, &raw); err != nil {
		return nil, fmt.Errorf("harnesskittest: read contract paths: %w", err)
	}
	declared := map[string][]string{}
	for p, ops := range raw.Paths {
		for m, op := range ops {
			for code := range op.Responses {
				k := strings.ToUpper(m) + " " + p
				declared[k] = append(declared[k], code)
			}
		}
	}
	return &Validator{v: v, declared: declared}, nil
}

// template returns the contract path template a request path matches.
func template(p string) (string, bool) {
	segs := strings.Split(strings.Trim(p, "/"), "/")
	switch {
	case len(segs) == 1 && segs[0] == "capabilities":
		return "/capabilities", true
	case len(segs) == 1 && segs[0] == "runs":
		return "/runs", true
	case len(segs) == 2 && segs[0] == "runs":
		return "/runs/{run_id}", true
	case len(segs) == 3 && segs[0] == "runs" && segs[2] == "stop":
		return "/runs/{run_id}/stop", true
	case len(segs) == 3 && segs[0] == "runs" && segs[2] == "trajectory":
		return "/runs/{run_id}/trajectory", true
	case len(segs) == 3 && segs[0] == "runs" && segs[2] == "files":
		return "/runs/{run_id}/files", true
	case len(segs) >= 4 && segs[0] == "runs" && segs[2] == "files":
		return "/runs/{run_id}/files/{path}", true
	}
	return "", false
}

// Response validates resp, the answer to req, and leaves resp.Body
// readable again. It returns nil or an error listing every violation.
func (v *Validator) Response(req *http.Request, resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("read response body: %w", err)
	}
	tmpl, ok := template(req.URL.Path)
	if !ok {
		return checkErrorBody(resp.StatusCode, resp.Header, body, "a path the contract does not declare")
	}
	op := req.Method + " " + tmpl
	codes, ok := v.declared[op]
	if !ok {
		return checkErrorBody(resp.StatusCode, resp.Header, body, "a method the contract does not declare on "+tmpl)
	}
	status := fmt.Sprint(resp.StatusCode)
	declared := false
	for _, c := range codes {
		if c == status {
			declared = true
		}
	}
	if !declared {
		return checkErrorBody(resp.StatusCode, resp.Header, body, op+" (declared: "+strings.Join(codes, ", ")+")")
	}
	// The contract's {path} is one segment; the kit serves nested
	// workspace paths, so match with the rest of the path escaped.
	r2 := req.Clone(req.Context())
	if tmpl == "/runs/{run_id}/files/{path}" {
		segs := strings.SplitN(strings.TrimPrefix(req.URL.Path, "/"), "/", 4)
		r2.URL = &url.URL{Path: "/runs/" + segs[1] + "/files/" + segs[3], RawPath: "/runs/" + url.PathEscape(segs[1]) + "/files/" + url.PathEscape(segs[3])}
	}
	r2.Body = http.NoBody
	r2.Header.Del("Content-Type")
	resp2 := *resp
	resp2.Body = io.NopCloser(bytes.NewReader(body))
	v.mu.Lock()
	ok, errs := v.v.ValidateHttpResponse(r2, &resp2)
	v.mu.Unlock()
	if ok {
		return nil
	}
	var all []error
	for _, e := range errs {
		msg := e.Message
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
		for _, se := range e.SchemaValidationErrors {
			msg += fmt.Sprintf(" [%s %s]", se.FieldPath, se.Reason)
		}
		all = append(all, errors.New(msg))
	}
	return fmt.Errorf("%s %s answered %d against the contract: %w", req.Method, req.URL.Path, resp.StatusCode, errors.Join(all...))
}

// checkErrorBody accepts a status the contract does not declare only as a
// 4xx or 5xx JSON error in the kit's shape.
func checkErrorBody(status int, h http.Header, body []byte, what string) error {
	if status < 400 {
		return fmt.Errorf("status %d for %s: only errors may use undeclared statuses", status, what)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("error status %d for %s has Content-Type %q, want application/json", status, what, ct)
	}
	var e struct {
		Error *struct {
			Code    *string `json:"code"`
			Message *string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || e.Error.Code == nil || e.Error.Message == nil || *e.Error.Code == "" || *e.Error.Message == "" {
		return fmt.Errorf("error status %d for %s: body is not {\"error\":{\"code\",\"message\"}}: %s", status, what, body)
	}
	return nil
}
