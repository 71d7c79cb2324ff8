package cli

import "testing"

func TestTracingEnabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{env: nil, want: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, want: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, want: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, want: true},
	} {
		a := &app{res: resolver{lookupEnv: func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }}}
		if got := a.tracingEnabled(); got != tc.want {
			t.Errorf("env %v: tracing %v, want %v", tc.env, got, tc.want)
		}
	}
}
