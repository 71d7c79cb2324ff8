package harnesskit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// intake is a POST /runs request once parsed and validated.
type intake struct {
	req     RunRequest
	uploads []File // multipart bytes, in req.Files order; nil for JSON
}

// parseRunRequest reads and validates a POST /runs body: a JSON RunRequest,
// or (accepts.files) multipart with a payload part and one part per file.
func (s *Server) parseRunRequest(w http.ResponseWriter, r *http.Request) (*intake, error) {
	if enc := r.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return nil, errorf(CodeUnsupportedMedia, "Content-Encoding %q is not supported", enc)
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if ct == "" {
		mt, err = "application/json", nil
	}
	if err != nil {
		return nil, errorf(CodeUnsupportedMedia, "Content-Type %q does not parse", ct)
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		raw, err := io.ReadAll(body)
		if err != nil {
			return nil, err
		}
		in, err := s.decodePayload(raw, "")
		if err != nil {
			return nil, err
		}
		for i, f := range in.req.Files {
			ptr := fmt.Sprintf("/files/%d", i)
			if f.URL == nil {
				return nil, errorf(CodeInvalidBody, "file %q has no url: send its bytes as multipart/form-data, or a url to fetch", f.Name).at(ptr + "/url")
			}
			if s.opts.NoFileURLs {
				return nil, errorf(CodeUnsupportedMedia, "this harness does not accept file urls (accepts.file_urls is false): send the files as multipart/form-data").at(ptr + "/url")
			}
			if err := s.checkFileURL(*f.URL); err != nil {
				return nil, errorf(CodeInvalidBody, "file %q: %s", f.Name, err).at(ptr + "/url")
			}
		}
		return in, nil
	case mt == "multipart/form-data":
		if s.opts.NoFiles {
			return nil, errorf(CodeUnsupportedMedia, "this harness does not accept multipart file uploads (accepts.files is false)")
		}
		boundary := params["boundary"]
		if boundary == "" {
			return nil, errorf(CodeUnsupportedMedia, "multipart/form-data without a boundary")
		}
		return s.parseMultipart(multipart.NewReader(body, boundary))
	default:
		return nil, errorf(CodeUnsupportedMedia, "Content-Type must be application/json or multipart/form-data, not %q", mt)
	}
}

// part is one multipart file part.
type part struct {
	formName, fileName, contentType string
	data                            []byte
	used                            bool
}

// parseMultipart reads a payload part (the RunRequest, its files without
// urls) and the file parts, then pairs each payload.files entry with the
// part whose filename, or else whose form name, is the entry's name (SPEC
// §7.2). File parts no entry names are delivered after the named ones,
// under their filename.
func (s *Server) parseMultipart(mr *multipart.Reader) (*intake, error) {
	var payload []byte
	var parts []*part
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return nil, err
			}
			return nil, errorf(CodeInvalidBody, "multipart body does not parse: %s", oneLine(err.Error()))
		}
		form, file := p.FormName(), p.FileName()
		if form == "payload" {
			if payload != nil {
				return nil, errorf(CodeInvalidBody, "multipart body has more than one payload part")
			}
			payload, err = io.ReadAll(p)
			if err != nil {
				return nil, partError(err)
			}
			if payload == nil {
				payload = []byte{}
			}
			continue
		}
		if form == "" && file == "" {
			continue // not a form field; nothing to pair it with
		}
		if len(parts) >= s.opts.MaxFiles {
			return nil, errorf(CodeInvalidBody, "more than %d file parts", s.opts.MaxFiles)
		}
		data, err := io.ReadAll(io.LimitReader(p, s.opts.MaxFileBytes+1))
		if err != nil {
			return nil, partError(err)
		}
		if int64(len(data)) > s.opts.MaxFileBytes {
			return nil, errorf(CodeBodyTooLarge, "file part %q is over the limit of %d bytes", firstNonEmpty(file, form), s.opts.MaxFileBytes)
		}
		parts = append(parts, &part{formName: form, fileName: file, contentType: p.Header.Get("Content-Type"), data: data})
	}
	if payload == nil {
		return nil, errorf(CodeInvalidBody, "multipart body has no payload part (a form field named \"payload\" holding the RunRequest JSON)")
	}
	in, err := s.decodePayload(payload, "/payload")
	if err != nil {
		return nil, err
	}
	for i, f := range in.req.Files {
		p := findPart(parts, func(p *part) bool { return p.fileName == f.Name })
		if p == nil {
			p = findPart(parts, func(p *part) bool { return p.fileName == "" && p.formName == f.Name })
		}
		if p == nil {
			p = findPart(parts, func(p *part) bool { return p.formName == f.Name })
		}
		if p == nil {
			return nil, errorf(CodeInvalidBody, "no multipart part carries file %q (a part with that filename or form name)", f.Name).at(fmt.Sprintf("/payload/files/%d", i))
		}
		p.used = true
		in.uploads = append(in.uploads, File{Name: f.Name, Context: deref(f.Context), ContentType: p.contentType, Data: p.data})
	}
	for _, p := range parts {
		if p.used || p.fileName == "" {
			continue
		}
		if !validFileName(p.fileName) || slicesContainsName(in.uploads, p.fileName) {
			return nil, errorf(CodeInvalidBody, "file part %q that payload.files does not name has an unusable or duplicate filename", p.fileName)
		}
		if len(in.uploads) >= s.opts.MaxFiles {
			return nil, errorf(CodeInvalidBody, "more than %d files", s.opts.MaxFiles)
		}
		in.req.Files = append(in.req.Files, FileRef{Name: p.fileName})
		in.uploads = append(in.uploads, File{Name: p.fileName, ContentType: p.contentType, Data: p.data})
	}
	return in, nil
}

func partError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return err
	}
	return errorf(CodeInvalidBody, "multipart part cannot be read: %s", oneLine(err.Error()))
}

func findPart(parts []*part, match func(*part) bool) *part {
	for _, p := range parts {
		if !p.used && match(p) {
			return p
		}
	}
	return nil
}

func slicesContainsName(files []File, name string) bool {
	for _, f := range files {
		if f.Name == name {
			return true
		}
	}
	return false
}

// decodePayload validates raw against the contract's RunRequest schema and
// the input against the harness's input schema, then decodes it. base is
// the pointer of the payload within the request ("" for a JSON body).
func (s *Server) decodePayload(raw []byte, base string) (*intake, error) {
	what := "body"
	if base != "" {
		what = "payload part"
	}
	if !utf8.Valid(raw) {
		return nil, errorf(CodeInvalidBody, "%s is not valid UTF-8", what)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, errorf(CodeInvalidBody, "%s is not valid JSON: %s", what, oneLine(err.Error()))
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, errorf(CodeInvalidBody, "%s must be a JSON object (a RunRequest)", what).at(base)
	}
	sch, err := runRequestSchema()
	if err != nil {
		return nil, fmt.Errorf("compile RunRequest schema: %w", err)
	}
	if err := sch.Validate(doc); err != nil {
		return nil, schemaError(CodeInvalidBody, "not a valid RunRequest", base, err)
	}
	if err := s.inputSchema.Validate(doc.(map[string]any)["input"]); err != nil {
		what := "input does not match the default input schema (an object with a required string \"question\")"
		if s.opts.InputSchema != nil {
			what = "input does not match the harness's input_schema"
		}
		return nil, schemaError(CodeInvalidInput, what, base+"/input", err)
	}
	var req RunRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, errorf(CodeInvalidBody, "not a valid RunRequest: %s", oneLine(err.Error())).at(base)
	}
	if len(req.Files) > s.opts.MaxFiles {
		return nil, errorf(CodeInvalidBody, "more than %d files", s.opts.MaxFiles).at(base + "/files")
	}
	seen := map[string]bool{}
	for i, f := range req.Files {
		ptr := fmt.Sprintf("%s/files/%d/name", base, i)
		if !validFileName(f.Name) {
			return nil, errorf(CodeInvalidBody, "file name %q is unusable: 1 to 255 bytes, no \"/\", \"\\\" or NUL, not \".\" or \"..\"", f.Name).at(ptr)
		}
		if seen[f.Name] {
			return nil, errorf(CodeInvalidBody, "file %q is named twice", f.Name).at(ptr)
		}
		seen[f.Name] = true
		if base != "" && f.URL != nil {
			return nil, errorf(CodeInvalidBody, "file %q has a url in a multipart payload: its bytes travel as a part", f.Name).at(fmt.Sprintf("%s/files/%d/url", base, i))
		}
	}
	return &intake{req: req}, nil
}

// validFileName reports whether a fixture name is usable as a file name.
func validFileName(name string) bool {
	return name != "" && len(name) <= 255 && name != "." && name != ".." &&
		!strings.ContainsAny(name, "/\\\x00")
}

// checkFileURL refuses a url the kit cannot fetch: without a FetchFile hook
// only absolute http and https urls.
func (s *Server) checkFileURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("url does not parse")
	}
	if s.opts.FetchFile != nil {
		return nil
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url scheme %q is not supported: this harness fetches http and https urls", u.Scheme)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
