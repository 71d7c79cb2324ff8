package grade

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
)

// grader is one compiled grader. grade never returns an error: anything it
// cannot judge is an abstention with a Reason… code.
type grader interface {
	grade(ctx context.Context, v *view, env *Env) Verdict
}

// Env is what grading may use beyond the item: injected, never global.
type Env struct {
	// Logger receives details of abstentions caused by errors (judge and
	// command failures). nil discards.
	Logger *slog.Logger
	// Judge answers judge graders; nil makes them abstain with
	// judge_unavailable.
	Judge Judge
	// AllowCommand decides whether a command grader may run argv for the
	// subject; nil refuses every command (abstention grader_not_allowed).
	// It is asked every time a command grader runs, so an executable the
	// operator stopped allowing no longer runs for suites accepted before.
	AllowCommand func(s Subject, argv []string) bool
	// Subject is what is being graded. The judge's calls are made for its
	// tenant and recorded against it; command allow-lists may be per
	// tenant.
	Subject Subject
	// Rand is the source of judge nonces; nil means crypto/rand.
	Rand io.Reader
}

// Subject names what a grading is for.
type Subject struct {
	// TenantID and TenantName are the subject's tenant; empty in the CLI.
	TenantID   string
	TenantName string
	// Kind is "rollout" or "run"; ID the rollout id, or for an eval run
	// "<experiment id>/<case id>/<repetition>".
	Kind string
	ID   string
}

// Subject kinds.
const (
	SubjectRollout = "rollout"
	SubjectRun     = "run"
)

func (e *Env) logger() *slog.Logger {
	if e == nil || e.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Logger
}

// Suite is a compiled list of graders: the compiled verifier suite of a
// task or an eval case. It is immutable and safe for concurrent use.
type Suite struct {
	specs []Spec
}

// Compile compiles parsed specs into a Suite. Specs built by hand (without
// ParseSpecs) are parsed from their Name and Config.
func Compile(specs []Spec) (Suite, error) {
	out := make([]Spec, len(specs))
	for i, s := range specs {
		if s.g == nil {
			raw, err := s.MarshalJSON()
			if err != nil {
				return Suite{}, fmt.Errorf("compile grader %d: %w", i, err)
			}
			ptr := s.Pointer
			parsed, err := parseSpec(raw, ptr)
			if err != nil {
				return Suite{}, err
			}
			parsed.Pointer = ptr
			s = parsed
		}
		out[i] = s
	}
	return Suite{specs: out}, nil
}

// Specs returns the suite's specs in order.
func (s Suite) Specs() []Spec { return append([]Spec(nil), s.specs...) }

// Len is the number of graders.
func (s Suite) Len() int { return len(s.specs) }

// MarshalJSON writes the suite as its list of declarations, which
// ParseSpecs reads back: this is the frozen form stored with a task.
func (s Suite) MarshalJSON() ([]byte, error) {
	if s.specs == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(s.specs)
}

// Graders returns a GraderRef per grader, in order.
func (s Suite) Graders() []GraderRef {
	out := make([]GraderRef, len(s.specs))
	for i, sp := range s.specs {
		out[i] = GraderRef{Label: sp.Label, Name: sp.Name, Version: sp.Version(), Flags: sp.Flags()}
	}
	return out
}

// Grade runs every grader on item, in order. It fails only when the item
// itself is invalid; a grader that cannot judge abstains.
func (s Suite) Grade(ctx context.Context, item *Item, env Env) (VerdictSet, error) {
	if item == nil {
		return VerdictSet{}, fmt.Errorf("grade: nil item")
	}
	if err := item.Validate(); err != nil {
		return VerdictSet{}, err
	}
	v := newView(item)
	set := VerdictSet{ItemSchema: ItemSchema, Verdicts: make([]Verdict, len(s.specs)), Graders: s.Graders()}
	for i, sp := range s.specs {
		set.Verdicts[i] = runOne(ctx, sp, v, &env)
	}
	return set, nil
}

func runOne(ctx context.Context, sp Spec, v *view, env *Env) (out Verdict) {
	defer func() {
		if r := recover(); r != nil {
			env.logger().ErrorContext(ctx, "grader panicked", slog.String("grader", sp.Name), slog.Any("panic", r))
			out = Verdict{Grader: sp.Label, Reason: ReasonGraderError}
		}
	}()
	out = sp.g.grade(ctx, v, env)
	out.Grader = sp.Label
	if out.Pass == nil {
		out.Score = nil
	} else if out.Score != nil {
		sc := *out.Score
		if math.IsNaN(sc) {
			out.Score = nil
		} else {
			sc = math.Max(0, math.Min(1, sc))
			out.Score = &sc
		}
	}
	return out
}

// view is an item plus lazily decoded JSON, shared by the graders of one
// Grade call (graders run sequentially).
type view struct {
	it *Item

	args     []any
	argsOK   []bool
	eargs    []any
	eargsOK  []bool
	outDone  bool
	out      any
	outErr   error
	textDone bool
	textVal  any
	textErr  error
}

func newView(it *Item) *view {
	return &view{
		it:      it,
		args:    make([]any, len(it.ToolCalls)),
		argsOK:  make([]bool, len(it.ToolCalls)),
		eargs:   make([]any, len(it.EmittedToolCalls)),
		eargsOK: make([]bool, len(it.EmittedToolCalls)),
	}
}

// callArgs is the decoded arguments of executed call i (nil when absent or
// malformed).
func (v *view) callArgs(i int) any {
	if !v.argsOK[i] {
		v.argsOK[i] = true
		if raw := v.it.ToolCalls[i].Arguments; !isNull(raw) {
			v.args[i], _ = decodeValue(raw)
		}
	}
	return v.args[i]
}

// emittedArgs is the decoded arguments of emitted call i. A string holding
// JSON (the model's raw arguments) is decoded once more.
func (v *view) emittedArgs(i int) any {
	if !v.eargsOK[i] {
		v.eargsOK[i] = true
		if raw := v.it.EmittedToolCalls[i].Arguments; !isNull(raw) {
			a, _ := decodeValue(raw)
			if s, ok := a.(string); ok {
				if inner, err := decodeValue([]byte(s)); err == nil {
					a = inner
				}
			}
			v.eargs[i] = a
		}
	}
	return v.eargs[i]
}

// output is the decoded output, or nil when it is null.
func (v *view) output() (any, error) {
	if !v.outDone {
		v.outDone = true
		if !isNull(v.it.Output) {
			v.out, v.outErr = decodeValue(v.it.Output)
		}
	}
	return v.out, v.outErr
}

// textJSON is the answer text parsed as JSON.
func (v *view) textJSON() (any, error) {
	if !v.textDone {
		v.textDone = true
		if t := v.it.Text(); t != nil {
			v.textVal, v.textErr = decodeValue([]byte(*t))
		}
	}
	return v.textVal, v.textErr
}
