package ui

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gyrehq/gyre/atif"
)

// The trajectory viewer renders a trajectory progressively: the run page
// carries the first steps, and each "more" block loads the next page of
// steps with htmx when it scrolls into view or is clicked. A page ends
// after stepsPerPage steps or once its text passes pageTextBudget bytes,
// so a 5 MB trajectory never becomes one DOM build.
const (
	stepsPerPage   = 25
	pageTextBudget = 256 << 10
	// maxShownText is the most of one text (message, reasoning,
	// arguments, observation) a step shows; the whole document is a
	// download away.
	maxShownText = 32 << 10
	// maxTrajectoryBytes bounds what the viewer reads: the evaluator
	// stores trajectories of up to 256 MiB (SPEC §7.2).
	maxTrajectoryBytes = 256 << 20
	// cachedTrajectories parsed trajectories stay in memory, by SHA-256
	// (content-addressed, so never stale), for the pages that follow.
	cachedTrajectories = 4
	// maxCachedBytes bounds the size of a trajectory the cache keeps.
	maxCachedBytes = 64 << 20
)

// parsedTrajectory is a trajectory blob read for display.
type parsedTrajectory struct {
	T *atif.Trajectory
	// Invalid lists why the document is not valid ATIF (it is shown as
	// far as it decodes).
	Invalid []string
	Size    int
}

// readTrajectory decodes trajectory bytes: validated when they are valid
// ATIF, else decoded leniently with the violations listed.
func readTrajectory(data []byte) (*parsedTrajectory, error) {
	res := atif.Check(data)
	p := &parsedTrajectory{T: res.Trajectory, Size: len(data)}
	for _, v := range res.Violations {
		p.Invalid = append(p.Invalid, v.String())
	}
	if res.Omitted > 0 {
		p.Invalid = append(p.Invalid, fmt.Sprintf("… and %d more violations", res.Omitted))
	}
	if p.T == nil || len(p.Invalid) > 0 {
		var t atif.Trajectory
		if err := json.Unmarshal(data, &t); err == nil {
			p.T = &t
		} else if lt, lerr := lenient(data); lerr == nil {
			p.T = lt
		} else if p.T == nil {
			return nil, fmt.Errorf("the trajectory does not decode: %w", err)
		}
	}
	return p, nil
}

// lenient decodes a document that is not valid ATIF step by step: a
// step that does not decode is shown as its JSON text with the reason,
// so one bad field hides nothing else.
func lenient(data []byte) (*atif.Trajectory, error) {
	var doc struct {
		SchemaVersion string            `json:"schema_version"`
		SessionID     *string           `json:"session_id"`
		Agent         json.RawMessage   `json:"agent"`
		Steps         []json.RawMessage `json:"steps"`
		Notes         *string           `json:"notes"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	t := &atif.Trajectory{SchemaVersion: doc.SchemaVersion, SessionID: doc.SessionID, Notes: doc.Notes}
	_ = json.Unmarshal(doc.Agent, &t.Agent)
	for i, raw := range doc.Steps {
		var st atif.Step
		if err := json.Unmarshal(raw, &st); err != nil {
			var head struct {
				Source string `json:"source"`
			}
			_ = json.Unmarshal(raw, &head)
			st = atif.Step{StepID: i + 1, Source: atif.Source(head.Source),
				Message: atif.TextContent("This step does not decode as ATIF (" + err.Error() + "); as sent:\n" + prettyJSON(raw))}
		}
		t.Steps = append(t.Steps, st)
	}
	return t, nil
}

// trajectoryCache keeps the last few parsed trajectories by SHA-256.
type trajectoryCache struct {
	mu    sync.Mutex
	order *list.List // of string keys, most recent first
	items map[string]*list.Element
	vals  map[string]*parsedTrajectory
}

func newTrajectoryCache() *trajectoryCache {
	return &trajectoryCache{order: list.New(), items: map[string]*list.Element{}, vals: map[string]*parsedTrajectory{}}
}

func (c *trajectoryCache) get(sha string) *parsedTrajectory {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[sha]; ok {
		c.order.MoveToFront(e)
		return c.vals[sha]
	}
	return nil
}

func (c *trajectoryCache) put(sha string, p *parsedTrajectory) {
	if p.Size > maxCachedBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[sha]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.items[sha] = c.order.PushFront(sha)
	c.vals[sha] = p
	for c.order.Len() > cachedTrajectories {
		last := c.order.Back()
		k := last.Value.(string)
		c.order.Remove(last)
		delete(c.items, k)
		delete(c.vals, k)
	}
}

// readAllLimited reads r up to limit bytes; more is an error.
func readAllLimited(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errors.New("the trajectory is larger than the viewer reads")
	}
	return b, nil
}

// shownText is one text of a step as shown: cut at maxShownText.
type shownText struct {
	Text string
	// Cut counts the bytes left out.
	Cut int
}

func showText(s string) shownText {
	if len(s) <= maxShownText {
		return shownText{Text: s}
	}
	cut := maxShownText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return shownText{Text: s[:cut], Cut: len(s) - cut}
}

// stepCall is one tool call of a step with the results that answer it.
type stepCall struct {
	ID, Name  string
	Arguments shownText
	Results   []shownText
	// Subagents names the subagent runs its results delegated to.
	Subagents []string
}

// stepView is one ATIF step as the viewer shows it.
type stepView struct {
	ID         int
	Source     string
	Timestamp  string
	Delta      string // time since the previous step, "" when unknown
	Model      string
	Message    shownText
	Images     []string
	Reasoning  *shownText
	Calls      []stepCall
	Unanswered []shownText // results answering no tool call of the step
	Metrics    *atif.Metrics
	LLMCalls   *int
	Copied     bool
	Extra      bool
}

// stepTime parses a step's ISO 8601 timestamp.
func stepTime(s *string) (time.Time, bool) {
	if s == nil {
		return time.Time{}, false
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00"} {
		if t, err := time.Parse(layout, *s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// formatDelta is a duration between steps, readable.
func formatDelta(d time.Duration) string {
	switch {
	case d < 0:
		return "−" + formatDelta(-d)
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	}
	return d.Round(time.Second).String()
}

func contentText(c *atif.Content) (shownText, []string) {
	if c == nil {
		return shownText{}, nil
	}
	var images []string
	for _, p := range c.Parts {
		if p.Type == atif.PartImage && p.Source != nil {
			// Named, never loaded: the page makes no request beyond the
			// server.
			images = append(images, p.Source.MediaType+" "+p.Source.Path)
		}
	}
	return showText(c.String()), images
}

func stepOf(s *atif.Step, prev *atif.Step) stepView {
	v := stepView{ID: s.StepID, Source: string(s.Source), Metrics: s.Metrics, LLMCalls: s.LLMCallCount, Copied: s.Copied(),
		Extra: len(s.Extra) > 0}
	if s.Timestamp != nil {
		v.Timestamp = *s.Timestamp
	}
	if prev != nil {
		if a, ok := stepTime(prev.Timestamp); ok {
			if b, ok := stepTime(s.Timestamp); ok {
				v.Delta = "+" + formatDelta(b.Sub(a))
			}
		}
	}
	if s.ModelName != nil {
		v.Model = *s.ModelName
	}
	msg := s.Message
	v.Message, v.Images = contentText(&msg)
	if s.ReasoningContent != nil {
		r := showText(*s.ReasoningContent)
		v.Reasoning = &r
	}
	index := map[string]int{}
	for _, c := range s.ToolCalls {
		index[c.ToolCallID] = len(v.Calls)
		v.Calls = append(v.Calls, stepCall{ID: c.ToolCallID, Name: c.FunctionName, Arguments: showText(prettyJSON(c.Arguments))})
	}
	if s.Observation != nil {
		for _, r := range s.Observation.Results {
			text, _ := contentText(r.Content)
			var subs []string
			for _, ref := range r.SubagentTrajectoryRef {
				switch {
				case ref.TrajectoryID != nil:
					subs = append(subs, "trajectory "+*ref.TrajectoryID)
				case ref.TrajectoryPath != nil:
					subs = append(subs, *ref.TrajectoryPath)
				case ref.SessionID != nil:
					subs = append(subs, "session "+*ref.SessionID)
				}
			}
			if r.SourceCallID != nil {
				if i, ok := index[*r.SourceCallID]; ok {
					v.Calls[i].Results = append(v.Calls[i].Results, text)
					v.Calls[i].Subagents = append(v.Calls[i].Subagents, subs...)
					continue
				}
			}
			v.Unanswered = append(v.Unanswered, text)
		}
	}
	return v
}

// stepsPage is one page of steps and where the next one starts.
type stepsPage struct {
	Steps []stepView
	// Next is the index of the first step of the next page, 0 when this
	// page ends the trajectory.
	Next  int
	Total int
	// MoreURL loads the next page.
	MoreURL string
}

// pageOfSteps cuts the page of steps that starts at index from.
func pageOfSteps(t *atif.Trajectory, from int) stepsPage {
	p := stepsPage{Total: len(t.Steps)}
	budget := 0
	for i := from; i < len(t.Steps); i++ {
		if len(p.Steps) == stepsPerPage || (len(p.Steps) > 0 && budget > pageTextBudget) {
			p.Next = i
			break
		}
		var prev *atif.Step
		if i > 0 {
			prev = &t.Steps[i-1]
		}
		v := stepOf(&t.Steps[i], prev)
		budget += v.size()
		p.Steps = append(p.Steps, v)
	}
	return p
}

// size is roughly how many bytes of text the step puts on the page.
func (v stepView) size() int {
	n := len(v.Message.Text)
	if v.Reasoning != nil {
		n += len(v.Reasoning.Text)
	}
	for _, c := range v.Calls {
		n += len(c.Arguments.Text)
		for _, r := range c.Results {
			n += len(r.Text)
		}
	}
	for _, r := range v.Unanswered {
		n += len(r.Text)
	}
	return n
}

// trajectoryHead is what the viewer shows above the steps.
type trajectoryHead struct {
	SchemaVersion string
	SessionID     string
	TrajectoryID  string
	Agent         atif.Agent
	Notes         string
	Final         *atif.FinalMetrics
	Usage         atif.Usage
	AgentSteps    int
	ToolCalls     int
	Subagents     []string
	Continued     string
	Duration      string
}

func headOf(t *atif.Trajectory) trajectoryHead {
	h := trajectoryHead{SchemaVersion: t.SchemaVersion, Agent: t.Agent, Final: t.FinalMetrics,
		Usage: t.TotalUsage(), AgentSteps: t.AgentSteps(), ToolCalls: len(t.ToolUses())}
	if t.SessionID != nil {
		h.SessionID = *t.SessionID
	}
	if t.TrajectoryID != nil {
		h.TrajectoryID = *t.TrajectoryID
	}
	if t.Notes != nil {
		h.Notes = *t.Notes
	}
	if t.ContinuedTrajectoryRef != nil {
		h.Continued = *t.ContinuedTrajectoryRef
	}
	for _, s := range t.SubagentTrajectories {
		name := s.Agent.Name
		if s.TrajectoryID != nil {
			name = *s.TrajectoryID + " (" + name + ")"
		}
		h.Subagents = append(h.Subagents, name+": "+strconv.Itoa(len(s.Steps))+" steps")
	}
	if n := len(t.Steps); n > 1 {
		if a, ok := stepTime(t.Steps[0].Timestamp); ok {
			if b, ok := stepTime(t.Steps[n-1].Timestamp); ok {
				h.Duration = formatDelta(b.Sub(a))
			}
		}
	}
	return h
}

// bytesText is a size in bytes, readable.
func bytesText(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}

// sourceClass is a step's look by who produced it.
func sourceClass(s string) string {
	switch s {
	case "system", "user", "agent":
		return "step-" + s
	}
	return "step-other"
}

// trimmed is a short preview of a text for a summary line.
func trimmed(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		cut := 120
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return s[:cut] + "…"
	}
	return s
}
