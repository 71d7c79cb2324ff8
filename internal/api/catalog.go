package api

// catalogRoutes registers fixtures, suites and tasks (SPEC §4.2, §4.8).
func (s *Server) catalogRoutes() {
}
