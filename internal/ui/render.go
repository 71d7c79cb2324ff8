package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
)

// parsePages parses every page template over the shared layout.
func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("base").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("ui templates: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("ui template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

var funcs = template.FuncMap{
	"when":          when,
	"filterForm":    newFilterForm,
	"pct":           pct,
	"lo":            func(i *[2]float64) *float64 { return &i[0] },
	"hi":            func(i *[2]float64) *float64 { return &i[1] },
	"ratio":         ratio,
	"num":           func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) },
	"jsonNum":       jsonNum,
	"short":         short,
	"stateClass":    stateClass,
	"deref":         deref,
	"prettyJSON":    prettyJSON,
	"hasJSON":       func(b json.RawMessage) bool { t := bytes.TrimSpace(b); return len(t) > 0 && string(t) != "null" },
	"link":          link,
	"list":          func(s ...string) []string { return s },
	"exclusionOf":   exclusionOf,
	"inc":           func(i int) int { return i + 1 },
	"runPath":       runPath,
	"cellText":      cellText,
	"cellClass":     cellClass,
	"signedPct":     signedPct,
	"signedDelta":   signedDelta,
	"code":          code,
	"bytesText":     bytesText,
	"size":          func(n any) string { v, _ := deref(n).(int64); return bytesText(int(v)) },
	"reasonMeaning": promotionReasonMeaning,
	"sourceClass":   sourceClass,
	"trimmed":       trimmed,
	"ms": func(d time.Duration) string {
		return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64) + " ms"
	},
}

// when formats a time (or a *time.Time; nil is a dash) in UTC.
func when(v any) string {
	switch t := v.(type) {
	case time.Time:
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	case *time.Time:
		if t == nil {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return "—"
}

// pct formats a rate (a float64 or a *float64; nil is a dash) as a
// percentage.
func pct(v any) string {
	f, ok := deref(v).(float64)
	if !ok {
		return "—"
	}
	return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
}

// jsonNum is a number the way the API states it (0, 0.5, 1, 1e-07):
// a setting someone typed reads back as typed, not padded to 0.000.
func jsonNum(v float64) string {
	b, err := json.Marshal(v)
	if err != nil { // NaN and ±Inf, which no stored setting holds
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return string(b)
}

// ratio formats n/d as a percentage, or a dash when d is 0.
func ratio(n, d int) string {
	if d == 0 {
		return "—"
	}
	return strconv.FormatFloat(float64(n)*100/float64(d), 'f', 1, 64) + "%"
}

// short is the last 8 characters of an id: UUIDv7s minted together
// share their first, time-ordered characters, so the tail tells them
// apart (pages show an id whole where it is the subject).
func short(id string) string {
	if len(id) > 8 {
		return "…" + id[len(id)-8:]
	}
	return id
}

// stateClass is the badge class of a rollout or batch state, outcome or
// tool-call outcome: unknown and abstentions each have their own look.
func stateClass(s any) string {
	switch fmt.Sprint(deref(s)) {
	case "graded", "ok", "passed", "finished", "true", "on_policy":
		return "b-ok"
	case "failed", "false", "off_policy", "abandoned", "deadline_exceeded":
		return "b-failed"
	case "unknown":
		return "b-unknown"
	case "unscored", "abstained", "unreconciled":
		return "b-abstain"
	case "cancelled", "released", "excluded":
		return "b-excluded"
	}
	return "b-neutral"
}

// code is a reason code as HTML, escaped, with a line-break opportunity
// after each colon: with the .code class, excluded:substrate_unavailable
// wraps there or not at all.
func code(s string) template.HTML {
	return template.HTML(strings.ReplaceAll(template.HTMLEscapeString(s), ":", ":<wbr>"))
}

// deref reads a pointer for a template; nil is "".
func deref(v any) any {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() == reflect.Pointer && rv.IsNil() {
		return ""
	}
	if rv.Kind() == reflect.Pointer {
		return rv.Elem().Interface()
	}
	return v
}

// prettyJSON indents a JSON document for display (the template escapes
// it); text that is not JSON is shown as it is.
func prettyJSON(b json.RawMessage) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}

// link builds a UI URL from a path and query pairs, leaving out empty
// values.
func link(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// orderedStates lists the non-zero state counts in life order.
func orderedStates(counts map[gyre.RolloutState]int) []stateCount {
	var out []stateCount
	for _, s := range gyre.RolloutStates {
		if n := counts[s]; n > 0 {
			out = append(out, stateCount{State: string(s), N: n})
		}
	}
	return out
}

type stateCount struct {
	State string
	N     int
}
