package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/store"
)

// Cookie and form names.
const (
	sessionCookie = "gyre_ui_session"
	// signinCookie carries the sign-in form's CSRF token (double submit):
	// the sign-in form is the one POST made before a session exists.
	signinCookie = "gyre_ui_signin"
	csrfField    = "csrf"
	keyField     = "key"
	// signinTTL bounds how long a sign-in form may be left open.
	signinTTL = time.Hour
)

// session is a signed-in user: one live key of one tenant.
type session struct {
	TenantID   string
	TenantName string
	KeyID      string
	Role       gyre.Role
	// CSRF is the token every state-changing form of this session
	// carries: derived from the session token, which only the browser's
	// HttpOnly cookie holds, so another site can neither read nor forge it.
	CSRF string
}

// Admin reports whether the session may use admin actions.
func (s session) Admin() bool { return s.Role == gyre.RoleAdmin }

func (s session) checkCSRF(got string) bool {
	return s.CSRF != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.CSRF)) == 1
}

var errNoSession = errors.New("no live session")

// csrfOf derives a session's CSRF token from its token.
func csrfOf(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("gyre ui csrf v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newToken mints 256 random bits, base64url.
func newToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("read random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// session finds the request's live session. The store checks, on every
// request, that it is unexpired and that its key is not revoked: there
// is no cache, so a revocation ends the session at the next request.
func (u *UI) session(r *http.Request) (session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil || len(c.Value) != 43 {
		return session{}, errNoSession
	}
	us, err := u.store.UISessionByHash(r.Context(), sha256.Sum256([]byte(c.Value)))
	if errors.Is(err, store.ErrNotFound) {
		return session{}, errNoSession
	}
	if err != nil {
		return session{}, err
	}
	s := session{TenantID: us.TenantID, KeyID: us.KeyID, Role: us.Role, CSRF: csrfOf(c.Value)}
	if !roleCanSignIn(s.Role) {
		return session{}, errNoSession
	}
	t, err := u.store.TenantByID(r.Context(), us.TenantID)
	if err != nil {
		return session{}, err
	}
	s.TenantName = t.Name
	return s, nil
}

func (u *UI) cookie(name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, Secure: u.secure, SameSite: http.SameSiteStrictMode}
}

type signinView struct {
	CSRF  string
	Error string
}

// signinPage is GET /ui/signin: the form, with a fresh CSRF cookie.
func (u *UI) signinPage(w http.ResponseWriter, r *http.Request) error {
	if _, err := u.session(r); err == nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return nil
	}
	return u.showSignin(w, r, http.StatusOK, "")
}

func (u *UI) showSignin(w http.ResponseWriter, r *http.Request, status int, msg string) error {
	tok, err := newToken()
	if err != nil {
		return err
	}
	http.SetCookie(w, u.cookie(signinCookie, tok, int(signinTTL.Seconds())))
	u.render(w, r, status, "signin", view{Title: "Sign in", Data: signinView{CSRF: tok, Error: msg}})
	return nil
}

// signin is POST /ui/signin: it exchanges a reader or admin key, sent in
// the form body (never in a URL), for a session cookie.
func (u *UI) signin(w http.ResponseWriter, r *http.Request) error {
	c, err := r.Cookie(signinCookie)
	if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue(csrfField))) != 1 {
		return errForbidden
	}
	secret := strings.TrimSpace(r.PostFormValue(keyField))
	if !auth.WellFormed(secret) {
		return u.showSignin(w, r, http.StatusUnauthorized, "That is not a gyre API key: keys start with "+auth.KeyPrefix+" and are 48 characters long.")
	}
	k, err := u.store.KeyByHash(r.Context(), auth.Hash(secret))
	if errors.Is(err, store.ErrNotFound) {
		return u.showSignin(w, r, http.StatusUnauthorized, "Unknown or revoked API key.")
	}
	if err != nil {
		return err
	}
	if !roleCanSignIn(k.Role) {
		return u.showSignin(w, r, http.StatusForbidden, fmt.Sprintf("A key with role %s cannot sign in: use a reader or admin key.", k.Role))
	}
	tok, err := newToken()
	if err != nil {
		return err
	}
	if _, err := u.store.CreateUISession(r.Context(), store.NewUISession{
		TokenHash: sha256.Sum256([]byte(tok)), TenantID: k.TenantID, KeyID: k.ID, TTL: u.cfg.SessionTTL,
	}); err != nil {
		if errors.Is(err, store.ErrNotFound) { // revoked meanwhile
			return u.showSignin(w, r, http.StatusUnauthorized, "Unknown or revoked API key.")
		}
		return err
	}
	http.SetCookie(w, u.cookie(signinCookie, "", -1))
	http.SetCookie(w, u.cookie(sessionCookie, tok, int(u.cfg.SessionTTL.Seconds())))
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
	return nil
}

// signout is POST /ui/signout: the session ends on the server at once.
func (u *UI) signout(w http.ResponseWriter, r *http.Request, _ session) error {
	c, err := r.Cookie(sessionCookie)
	if err == nil {
		if err := u.store.DeleteUISession(r.Context(), sha256.Sum256([]byte(c.Value))); err != nil {
			return err
		}
	}
	http.SetCookie(w, u.cookie(sessionCookie, "", -1))
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
	return nil
}
