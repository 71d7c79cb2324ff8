package promotion

import "testing"

func TestBatchPolicy_NamedThenPromotedThenDefault(t *testing.T) {
	t.Parallel()
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		name            string
		named, promoted *string
		def, want       string
	}{
		{"the body's policy wins", s("named"), s("promoted"), "default", "named"},
		{"else the promoted policy", nil, s("promoted"), "default", "promoted"},
		{"an empty promoted policy is none", nil, s(""), "default", "default"},
		{"else the server default", nil, nil, "default", "default"},
		{"else none", nil, nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BatchPolicy(tc.named, tc.promoted, tc.def); got != tc.want {
				t.Errorf("BatchPolicy = %q, want %q", got, tc.want)
			}
		})
	}
}
