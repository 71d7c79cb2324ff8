package ui

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/gateway"
	"github.com/gyrehq/gyre/internal/harness"
	"github.com/gyrehq/gyre/internal/store"
	"github.com/gyrehq/gyre/internal/telemetry"
)

// Prefix is where the UI lives; its session cookie is scoped to it.
const Prefix = "/ui/"

// DefaultSessionTTL is how long a sign-in lasts (SPEC §3).
const DefaultSessionTTL = 12 * time.Hour

// Config tunes the UI.
type Config struct {
	// PublicURL is the base URL users reach the server at; an https URL
	// makes the session cookie Secure.
	PublicURL string
	// SessionTTL is a session's lifetime (default 12 h).
	SessionTTL time.Duration
}

// Deps are the UI's collaborators.
type Deps struct {
	// Store is required.
	Store store.Store
	// Blobs holds the gateway's recorded bodies; nil shows a rollout's
	// calls without their conversation.
	Blobs gateway.BlobReader
	// Logger receives internal errors; nil discards them.
	Logger *slog.Logger
	// Clock dates pages; nil is the wall clock.
	Clock clock.Clock
	// Datasets builds the datasets the UI creates; nil leaves them to
	// whichever process runs a builder.
	Datasets DatasetBuilder
	// Harnesses is the harness registry of the sessions browser; nil
	// shows the harness pages as not configured.
	Harnesses *harness.Registry
}

// UI is the web UI's HTTP handler for every path under Prefix.
type UI struct {
	cfg   Config
	store store.Store
	blobs gateway.BlobReader
	// builder builds created datasets; nil leaves them to a builder.
	builder DatasetBuilder
	// harnesses is the sessions browser's registry; nil when not wired.
	harnesses *harness.Registry
	log       *slog.Logger
	clock     clock.Clock
	secure    bool
	pages     map[string]*template.Template
	static    http.Handler
	mux       *http.ServeMux
	// trajectories keeps the last parsed trajectories for the viewer's
	// pages of steps.
	trajectories *trajectoryCache
	// comparisons keeps the last comparisons of finished experiments,
	// reports their decoded summaries.
	comparisons comparisonCache
	reports     reportCache
}

//go:embed static
var staticFS embed.FS

//go:embed templates
var templateFS embed.FS

// New returns the UI.
func New(cfg Config, d Deps) (*UI, error) {
	if d.Store == nil {
		return nil, errors.New("ui: a store is required")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SessionTTL < 0 {
		return nil, fmt.Errorf("ui: session ttl must be positive, not %s", cfg.SessionTTL)
	}
	if d.Logger == nil {
		d.Logger = telemetry.Discard()
	}
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	secure := false
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil {
			return nil, fmt.Errorf("ui: public url: %w", err)
		}
		secure = u.Scheme == "https"
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	u := &UI{
		cfg: cfg, store: d.Store, blobs: d.Blobs, builder: d.Datasets, harnesses: d.Harnesses, log: d.Logger, clock: d.Clock,
		secure: secure, pages: pages,
		static: http.StripPrefix(Prefix+"static/", http.FileServerFS(sub)),
		mux:    http.NewServeMux(),

		trajectories: newTrajectoryCache(),
	}
	u.routes()
	return u, nil
}

// routes is the UI's route table. Pages take the signed-in session;
// POSTs also check its CSRF token.
func (u *UI) routes() {
	u.mux.HandleFunc("GET /ui/static/{file}", u.serveStatic)
	u.mux.Handle("GET /ui/signin", u.public(u.signinPage))
	u.mux.Handle("POST /ui/signin", u.public(u.signin))
	u.mux.Handle("POST /ui/signout", u.form(u.signout))
	u.mux.Handle("GET /ui/{$}", u.page(u.overview))
	u.mux.Handle("GET /ui/batches", u.page(u.batches))
	u.mux.Handle("GET /ui/batches/{id}", u.page(u.batch))
	u.mux.Handle("GET /ui/batches/{id}/live", u.page(u.batchLive))
	u.mux.Handle("GET /ui/rollouts/{id}", u.page(u.rollout))
	u.mux.Handle("GET /ui/experiments", u.page(u.experiments))
	u.mux.Handle("GET /ui/experiments/{id}", u.page(u.experiment))
	u.mux.Handle("GET /ui/experiments/{id}/live", u.page(u.experimentLivePart))
	u.mux.Handle("GET /ui/experiments/{id}/runs/{case}/{rep}", u.page(u.run))
	u.mux.Handle("GET /ui/experiments/{id}/runs/{case}/{rep}/steps", u.page(u.runSteps))
	u.mux.Handle("GET /ui/experiments/{id}/runs/{case}/{rep}/trajectory", u.page(u.runTrajectory))
	u.mux.Handle("GET /ui/compare", u.page(u.compare))
	u.mux.Handle("GET /ui/turns", u.page(u.turns))
	u.mux.Handle("GET /ui/datasets", u.page(u.datasets))
	u.mux.Handle("POST /ui/datasets", u.form(u.createDataset))
	u.mux.Handle("GET /ui/datasets/{id}", u.page(u.dataset))
	u.mux.Handle("GET /ui/datasets/{id}/live", u.page(u.datasetLivePart))
	u.mux.Handle("GET /ui/datasets/{id}/file", u.page(u.datasetFile))
	u.mux.Handle("GET /ui/datasets/{id}/manifest", u.page(u.datasetManifest))
	u.mux.Handle("GET /ui/policies", u.page(u.policies))
	u.mux.Handle("GET /ui/policies/{name}", u.page(u.policy))
	u.mux.Handle("GET /ui/promotions", u.page(u.promotions))
	u.mux.Handle("GET /ui/promotions/{id}", u.page(u.promotionPage))
	u.mux.Handle("GET /ui/agents/{agent}", u.page(u.agentPolicy))
	u.mux.Handle("POST /ui/agents/{agent}/rollback", u.form(u.rollback))
	u.mux.Handle("GET /ui/harnesses", u.page(u.harnessList))
	u.mux.Handle("POST /ui/harnesses", u.form(u.registerHarness))
	u.mux.Handle("GET /ui/harnesses/{id}", u.page(u.harnessSessions))
	u.mux.Handle("GET /ui/harnesses/{id}/delete", u.page(u.confirmDeleteHarness))
	u.mux.Handle("POST /ui/harnesses/{id}/delete", u.form(u.deleteHarness))
	u.mux.Handle("GET /ui/harnesses/{id}/runs/{run}", u.page(u.harnessRun))
	u.mux.Handle("GET /ui/harnesses/{id}/runs/{run}/steps", u.page(u.harnessRunSteps))
	u.mux.Handle("/ui/", u.public(func(w http.ResponseWriter, r *http.Request) error {
		return errPageNotFound
	}))
}

// ServeHTTP sets the security headers every UI response carries, then
// routes the request.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	u.mux.ServeHTTP(w, r)
}

// ContentSecurityPolicy allows the page's own scripts, styles and images
// only: no inline script or style, no other origin, no framing.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'"

func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

func (u *UI) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if _, err := fs.Stat(staticFS, "static/"+name); err != nil || strings.HasSuffix(name, ".md") {
		u.fail(w, r, errPageNotFound)
		return
	}
	// Asset names carry their version, so browsers may keep them a day.
	w.Header().Set("Cache-Control", "public, max-age=86400")
	u.static.ServeHTTP(w, r)
}

// handler is a UI route: it renders, or returns an error for fail.
type handler func(w http.ResponseWriter, r *http.Request) error

// sessionHandler is a route of a signed-in user.
type sessionHandler func(w http.ResponseWriter, r *http.Request, s session) error

func (u *UI) public(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if err := h(w, r); err != nil {
			u.fail(w, r, err)
		}
	})
}

// page serves a GET of a signed-in user; without a live session it sends
// the browser to the sign-in page.
func (u *UI) page(h sessionHandler) http.Handler {
	return u.public(func(w http.ResponseWriter, r *http.Request) error {
		s, err := u.session(r)
		if errors.Is(err, errNoSession) {
			u.toSignin(w, r)
			return nil
		}
		if err != nil {
			return err
		}
		return h(w, r, s)
	})
}

// form serves a state-changing POST of a signed-in user: it needs a live
// session and that session's CSRF token, else 403.
func (u *UI) form(h sessionHandler) http.Handler {
	return u.public(func(w http.ResponseWriter, r *http.Request) error {
		s, err := u.session(r)
		if errors.Is(err, errNoSession) {
			return errForbidden
		}
		if err != nil {
			return err
		}
		if !s.checkCSRF(r.PostFormValue(csrfField)) {
			return errForbidden
		}
		return h(w, r, s)
	})
}

// toSignin redirects to the sign-in page; an htmx request is told to
// navigate there instead of swapping the page into a fragment.
func (u *UI) toSignin(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("HX-Request") == "true" {
		w.Header().Set("HX-Redirect", Prefix+"signin")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}

// pageError is an error shown to the user as it is, with its status.
type pageError struct {
	status int
	msg    string
}

func (e *pageError) Error() string { return e.msg }

var (
	errPageNotFound = &pageError{http.StatusNotFound, "There is no such page, or nothing of that id in your tenant."}
	errForbidden    = &pageError{http.StatusForbidden, "This form has expired or did not come from this site (missing or wrong CSRF token). Reload the page and try again."}
)

func badRequest(format string, args ...any) error {
	return &pageError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// fail answers err as an HTML page: a not-found store error as 404, a
// pageError with its status and message, anything else as 500 with a
// generic message (the details go to the log only).
func (u *UI) fail(w http.ResponseWriter, r *http.Request, err error) {
	var pe *pageError
	switch {
	case errors.As(err, &pe):
	case errors.Is(err, store.ErrNotFound):
		pe = errPageNotFound
	case errors.Is(err, store.ErrInvalidCursor):
		pe = &pageError{http.StatusBadRequest, "This page link is out of date (its cursor belongs to another list). Start from the first page."}
	default:
		u.log.LogAttrs(r.Context(), slog.LevelError, "ui page failed",
			slog.String("path_template", r.Pattern), slog.Any("error", err))
		pe = &pageError{http.StatusInternalServerError, "Something went wrong on the server. The error was logged."}
	}
	s, _ := u.session(r)
	u.render(w, r, pe.status, "error", view{Title: http.StatusText(pe.status), Session: s, Data: pe.msg})
}

// view is what every page template gets.
type view struct {
	Title   string
	Nav     string // the nav entry of this page
	Session session
	Data    any
}

func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	t, ok := u.pages[page]
	if !ok {
		panic("ui: no template " + page)
	}
	var b strings.Builder
	name := "layout"
	if strings.HasSuffix(page, "-fragment") {
		name = "fragment"
	}
	if err := t.ExecuteTemplate(&b, name, v); err != nil {
		u.log.LogAttrs(r.Context(), slog.LevelError, "ui render failed", slog.String("page", page), slog.Any("error", err))
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// roleCanSignIn: reader and admin keys open the UI (SPEC §11).
func roleCanSignIn(r gyre.Role) bool { return r == gyre.RoleReader || r == gyre.RoleAdmin }
