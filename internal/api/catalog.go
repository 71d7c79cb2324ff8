package api

import (
	"net/http"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/grade"
	"github.com/gyrehq/gyre/internal/suite"
)

// catalogReader opens a catalog GET to readers and evaluators (SPEC §3:
// an evaluator key reads suites, and the fixtures they hand to a harness).
var catalogReader = access{roles: []gyre.Role{gyre.RoleReader, gyre.RoleEvaluator}}

// catalogRoutes registers fixtures, suites and tasks (SPEC §4.2, §4.8).
// Every object is the caller's tenant's: another tenant's name or id is
// 404, like one that does not exist.
func (s *Server) catalogRoutes() {
	s.handle("PUT /api/v1/fixtures/{name}", access{roles: adminOnly.roles, blobBody: true, ownMediaType: true}, s.putFixture)
	s.handle("GET /api/v1/fixtures", catalogReader, s.listFixtures)
	s.handle("GET /api/fixtures/{name}", catalogReader, s.getFixtureContent)

	s.handle("POST /api/v1/suites", access{roles: adminOnly.roles, ownMediaType: true}, s.createSuite)
	s.handle("GET /api/v1/suites", catalogReader, s.listSuites)
	s.handle("GET /api/v1/suites/{name}/versions/{version}", catalogReader, s.getSuiteVersion)

	s.handle("POST /api/v1/tasks", adminOnly, s.createTasks)
	s.handle("POST /api/v1/tasks/from-turns", adminOnly, s.createTasksFromTurns)
	s.handle("GET /api/v1/tasks", reader, s.listTasks)
	s.handle("GET /api/v1/tasks/{id}", reader, s.getTask)
}

// pathName returns the path parameter name, percent-decoded, when it
// follows the name grammar of SPEC §2 (^[A-Za-z0-9._-]{1,255}$, not "."
// or ".."); otherwise 400 invalid_path_param.
func pathName(r *http.Request, name string) (string, error) {
	v := r.PathValue(name)
	if !suite.ValidName(v) {
		return "", errPathParam(name, `a name of 1 to 255 characters from A-Z a-z 0-9 . _ - (not "." or "..")`)
	}
	return v, nil
}

// allowsCommand reports whether the operator allow-lists a command
// grader's executable; with no allow-list every command is refused.
func (s *Server) allowsCommand(argv []string) bool {
	return len(argv) > 0 && s.cfg.AllowCommand != nil && s.cfg.AllowCommand(argv[0])
}

// checkCommands refuses command graders the operator has not allow-listed:
// 422 grader_not_allowed at the grader's command config.
func (s *Server) checkCommands(specs []grade.Spec) error {
	for _, sp := range specs {
		if argv := sp.CommandArgv(); argv != nil && !s.allowsCommand(argv) {
			return gyre.Errorf(gyre.CodeGraderNotAllowed,
				"command grader %q is not allowed on this server: the operator allow-lists executables in gyre.yaml (graders.command.allow)",
				argv[0]).AtPointer(sp.Pointer + "/command")
		}
	}
	return nil
}
