// Package telemetry sets up gyre's logs, metrics and traces: a log/slog logger
// (JSON when the output is not a terminal, text otherwise) and one
// Prometheus registry per server, never the process-wide default, holding
// the Go and process collectors and the HTTP request metrics. Metric
// labels carry route templates and statuses only, never raw paths, so no
// customer string or secret becomes a label. Traces are OpenTelemetry
// spans exported over OTLP/HTTP when configured, named and labelled the
// same way.
package telemetry
