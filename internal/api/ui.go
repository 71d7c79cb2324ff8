package api

import "net/http"

// uiAccess is the web UI's routes: no API key (the UI signs users in
// with its own session cookie, which no other route accepts), and
// bodies that are HTML forms, not JSON.
var uiAccess = access{ownMediaType: true}

// uiRoutes mounts the web UI (SPEC §11) under /ui/ and sends "/" alone
// there; every other unknown path keeps its JSON 404.
func (s *Server) uiRoutes() {
	if s.ui == nil {
		return
	}
	s.handle("GET /{$}", uiAccess, func(w http.ResponseWriter, r *http.Request) error {
		http.Redirect(w, r, "/ui/", http.StatusFound)
		return nil
	})
	serve := func(w http.ResponseWriter, r *http.Request) error {
		s.ui.ServeHTTP(w, r)
		return nil
	}
	s.handle("GET /ui/", uiAccess, serve)
	s.handle("POST /ui/", uiAccess, serve)
}
