package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gyrehq/gyre"
)

var (
	errNoRoute     = gyre.Errorf(gyre.CodeNotFound, "no such endpoint")
	errUncleanPath = gyre.Errorf(gyre.CodeInvalidPathParam, "the path has an empty, \".\" or \"..\" segment")
)

func errMethodNotAllowed(method string) *gyre.Error {
	return gyre.Errorf(gyre.CodeMethodNotAllowed, "method %s is not allowed on this endpoint", methodLabel(method))
}

// cleanPath is the canonical form of p, as ServeMux computes it.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// readBody reads r's body, which bodyLimit has already capped, undoing a
// gzip Content-Encoding with the same cap on the decompressed size. Other
// encodings are refused with 415.
func readBody(r *http.Request, max int64) ([]byte, error) {
	var body io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return nil, errBodyTooLarge(max)
			}
			return nil, gyre.Errorf(gyre.CodeInvalidBody, "body is not valid gzip")
		}
		defer zr.Close()
		body = zr
	default:
		return nil, gyre.Errorf(gyre.CodeUnsupportedMedia, "Content-Encoding %q is not supported: send identity or gzip", enc)
	}
	b, err := io.ReadAll(io.LimitReader(body, max+1))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errBodyTooLarge(max)
		}
		if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, gyre.Errorf(gyre.CodeInvalidBody, "body is not valid gzip or was cut short")
		}
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(b)) > max {
		return nil, errBodyTooLarge(max)
	}
	return b, nil
}

// decodeJSON strictly decodes r's body, a JSON object, into dst, a
// pointer to a struct whose fields carry json tags. It refuses, as 422
// invalid_body with a pointer to the member at fault: a body that is not
// one JSON object, invalid UTF-8, duplicate members, unknown members and
// members of the wrong type. A member set to null counts as absent. A
// Content-Type other than JSON is 415.
func (s *Server) decodeJSON(r *http.Request, dst any) error {
	if err := requireJSON(r); err != nil {
		return err
	}
	b, err := readBody(r, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	return decodeObject(b, dst)
}

// requireJSON refuses, as 415, a request whose declared Content-Type is not
// JSON (application/json or any +json type); a request without one is
// taken to send JSON.
func requireJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return gyre.Errorf(gyre.CodeUnsupportedMedia, "Content-Type must be application/json")
	}
	return nil
}

// requireJSONBody is requireJSON for a request that may carry a body: one
// that declares an empty body (Content-Length: 0, as curl -d "" sends with
// a form Content-Type) is let through, so the routes whose body is empty
// or optional (heartbeat, release, claim, cancel) keep working.
func requireJSONBody(r *http.Request) error {
	if r.ContentLength == 0 {
		return nil
	}
	return requireJSON(r)
}

// decodeObject is decodeJSON after the body has been read.
func decodeObject(b []byte, dst any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return gyre.Errorf(gyre.CodeInvalidBody, "body is empty: send a JSON object")
	}
	if !utf8.Valid(b) {
		return gyre.Errorf(gyre.CodeInvalidBody, "body is not valid UTF-8")
	}
	fields := jsonFields(dst)
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return syntaxError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return gyre.Errorf(gyre.CodeInvalidBody, "body must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return syntaxError(err)
		}
		name := tok.(string) // object keys are always strings
		ptr := "/" + escapePointer(name)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return syntaxError(err)
		}
		if seen[name] {
			return gyre.Errorf(gyre.CodeInvalidBody, "member %q appears more than once", name).AtPointer(ptr)
		}
		seen[name] = true
		f, ok := fields[name]
		if !ok {
			return gyre.Errorf(gyre.CodeInvalidBody, "unknown member %q", name).AtPointer(ptr)
		}
		if err := json.Unmarshal(raw, f.v.Addr().Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return gyre.Errorf(gyre.CodeInvalidBody, "%s must be %s, not a JSON %s", name, jsonType(te.Type), te.Value).AtPointer(ptr)
			}
			return gyre.Errorf(gyre.CodeInvalidBody, "%s is invalid", name).AtPointer(ptr)
		}
		if !f.contractText {
			if at, ok := holdsNUL(f.v, ptr); ok {
				return errNUL(at)
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return syntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return gyre.Errorf(gyre.CodeInvalidBody, "body has data after the JSON object")
	}
	return nil
}

func syntaxError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return gyre.Errorf(gyre.CodeInvalidBody, "body is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return gyre.Errorf(gyre.CodeInvalidBody, "body is not valid JSON: it ends too early")
	}
	return gyre.Errorf(gyre.CodeInvalidBody, "body is not valid JSON")
}

// decodedField is a field of a body struct that decodeObject fills.
type decodedField struct {
	v reflect.Value
	// contractText marks a string a contract defines (tag text:"contract",
	// e.g. a harness's answer): it may hold U+0000, which the store keeps
	// losslessly. Every other string of a body is gyre's own and is
	// refused with U+0000 (errNUL).
	contractText bool
}

// jsonFields maps the json names of *dst's fields to the fields.
func jsonFields(dst any) map[string]decodedField {
	v := reflect.ValueOf(dst).Elem()
	t := v.Type()
	fields := make(map[string]decodedField, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = decodedField{v: v.Field(i), contractText: t.Field(i).Tag.Get("text") == "contract"}
	}
	return fields
}

// holdsNUL finds a string holding U+0000 in a decoded value (a string, a
// pointer to one, or a slice of them) and returns its JSON pointer.
func holdsNUL(v reflect.Value, ptr string) (string, bool) {
	switch v.Kind() {
	case reflect.String:
		return ptr, strings.IndexByte(v.String(), 0) >= 0
	case reflect.Pointer:
		if !v.IsNil() {
			return holdsNUL(v.Elem(), ptr)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // json.RawMessage: JSON text, kept escaped
			return "", false
		}
		for i := range v.Len() {
			if at, ok := holdsNUL(v.Index(i), ptr+"/"+strconv.Itoa(i)); ok {
				return at, true
			}
		}
	}
	return "", false
}

// errNUL refuses U+0000 in text gyre defines: PostgreSQL cannot keep it in
// text, and no name, id or URL needs it, so every store answers alike.
func errNUL(pointer string) *gyre.Error {
	return gyre.Errorf(gyre.CodeInvalidBody, "%s must not contain U+0000", strings.TrimPrefix(pointer, "/")).AtPointer(pointer)
}

// jsonType names the JSON type a Go type decodes from.
func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(jsonType(t.Elem()), "a "), "an ") + "s"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonType(t.Elem())
	}
	return "a " + t.String()
}

// escapePointer escapes one RFC 6901 reference token.
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
