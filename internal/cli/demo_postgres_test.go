package cli

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/demo"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

// gyre demo --db postgres://… runs the whole loop on PostgreSQL (its
// first admin key in <data>/demo/admin.key), sized down, with the same
// figures as on SQLite (demo.txtar's second run): 3 production turns and
// the 15 suite cases; D4's 2 cases excluded and retried once each, E5's
// refund unscored; the sft export holds exactly the passing
// training-grade rollouts; the promotion passes the gate on the 12 tasks
// without trouble.
func TestDemo_RunsTheWholeLoopOnPostgres(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	db := storetest.SearchPathURL(t, url, storetest.NewPostgresSchema(t, url))
	env := map[string]string{}
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	code, stdout, stderr := runGyre(t, env, "demo", "--data", t.TempDir(), "--db", db, "--json",
		"--turns", "3", "--promotion-repetitions", "1", "--repetitions", "1")
	if code != ExitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if strings.Contains(stderr, `"level":"ERROR"`) {
		t.Errorf("the server logged an error:\n%s", stderr)
	}
	var sum demo.Summary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("stdout is not the summary: %v\n%s", err, stdout)
	}
	if sum.Failed != nil || !strings.HasPrefix(sum.Serve.Store, "PostgreSQL postgres://") {
		t.Fatalf("failed stage %v, store %q", sum.Failed, sum.Serve.Store)
	}
	b, tg, ds, p := sum.Batch, sum.TrainingGrade, sum.Dataset, sum.Promotion
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"turns captured", sum.Turns.Captured, 3},
		{"tasks from the suite", sum.Tasks.FromSuite, 15},
		{"promotion task ids", len(sum.Tasks.PromotionTaskIDs), 12},
		{"rollouts", b.Rollouts, 18},
		{"retries", b.Retries, 2},
		{"graded", b.Graded, 20},
		{"passed", b.Passed, 4},
		{"failed", b.Failed, 11},
		{"unscored", b.Unscored, 1},
		{"excluded", b.Excluded, 4},
		{"excluded substrate_unavailable", b.Exclusions["substrate_unavailable"], 4},
		{"finished", tg.Finished, 18},
		{"training grade", tg.TrainingGrade, 15},
		{"not training grade: excluded:substrate_unavailable", tg.Reasons["excluded:substrate_unavailable"], 2},
		{"not training grade: no_verdict", tg.Reasons["no_verdict"], 1},
		{"sft rows (the passing training-grade rollouts)", ds.Rows, b.Passed},
		{"promotion tasks", p.Tasks, 12},
		{"fixed", len(p.Fixed), 8},
		{"regressed", len(p.Regressed), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if len(tg.Reasons) != 2 {
		t.Errorf("not training grade because %v", tg.Reasons)
	}
	if p.Decision != "promoted" {
		t.Errorf("promotion %s %v", p.Decision, p.Reasons)
	}
}
