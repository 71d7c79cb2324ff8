// Package api is the HTTP server of gyre serve: one route table on a
// net/http ServeMux, handlers that return error, and one adapter that
// turns an error into the status and JSON body of SPEC §2:
//
//	{"error":{"code":"snake_case_code","message":"human sentence","pointer":"/json/pointer"}}
//
// Every response carries an X-Request-Id (a sane incoming one is kept,
// otherwise one is minted). Every request is logged once, with its route
// template (never the raw path), status, duration and request id, and
// counted in the server's Prometheus registry. Panics become 500s; bodies
// are limited (413 body_too_large, decompressed sizes included); unknown
// paths answer 404 not_found, known paths with another method 405
// method_not_allowed, and paths with empty or dot segments 400
// invalid_path_param, never a redirect.
//
// Routes that need a key authenticate through internal/auth on every
// request; a foreign tenant's id answers 404, never 403.
package api
