package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/gyrehq/gyre"
)

type status struct {
	Status string `json:"status"`
}

// healthz answers 200 while the process serves requests.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, status{Status: "ok"})
	return nil
}

// readyz answers 200 when the store is reachable and fully migrated,
// 503 unavailable otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "not ready",
			slog.String("request_id", infoFrom(ctx).id), slog.Any("error", err))
		return gyre.Errorf(gyre.CodeUnavailable, "the store is not ready")
	}
	writeJSON(w, http.StatusOK, status{Status: "ready"})
	return nil
}

// metricsRoute serves the Prometheus registry to any key of the tenant.
func (s *Server) metricsRoute(w http.ResponseWriter, r *http.Request) error {
	s.metrics.Handler().ServeHTTP(w, r)
	return nil
}
