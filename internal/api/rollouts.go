package api

// rolloutRoutes registers batches, claims, heartbeats, releases, outputs
// and the rollout read APIs (SPEC §4.2–§4.8).
func (s *Server) rolloutRoutes() {
}
