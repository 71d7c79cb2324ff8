package storetest

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

// Engine describes one engine to the engine-level tests (RunEngine) and
// to the child processes they start (Main). Every func but Fresh must work
// without a *testing.T, in a child process given only loc.
type Engine struct {
	// Fresh returns the location of a new, empty, unmigrated database that
	// lives as long as t: a file path, a URL…
	Fresh func(t *testing.T) string
	// Open opens the store at loc, migrating it first if migrate is set.
	Open func(ctx context.Context, loc string, migrate bool) (store.Store, error)
	// Migrate migrates loc with handles of its own, as `gyre migrate` does.
	Migrate func(ctx context.Context, loc string) error
	// Raw opens a plain database/sql handle on loc, for assertions and to
	// tamper with the schema version.
	Raw func(loc string) (*sql.DB, error)
	// DownTo migrates loc down to version with the migrations' own Down
	// sections, as an older gyre's schema was.
	DownTo func(ctx context.Context, loc string, version int64) error
	// Latest is the schema version of the embedded migrations.
	Latest int64
	// Check, if set, runs the engine's own consistency checks on loc after
	// a crash (SQLite's integrity_check).
	Check func(t *testing.T, loc string)
}

// Environment of child processes: the mode, the database, the mode's
// argument and, for writers, how many rows each goroutine writes.
const (
	envChild = "GYRE_STORETEST_CHILD"
	envLoc   = "GYRE_STORETEST_LOC"
	envArg   = "GYRE_STORETEST_ARG"
	envN     = "GYRE_STORETEST_N"
)

// Main is the TestMain of an engine's test package: in a child process
// started by RunEngine it runs the child's part and exits, otherwise it
// runs the tests.
func Main(m *testing.M, e Engine) {
	mode := os.Getenv(envChild)
	if mode == "" {
		os.Exit(m.Run())
	}
	if err := runChild(context.Background(), e, mode, os.Getenv(envLoc), os.Getenv(envArg)); err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", mode, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(ctx context.Context, e Engine, mode, loc, arg string) error {
	// Wait for the parent's go, so that all children act at once.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for go: %w", err)
	}
	switch mode {
	case "migrate":
		return e.Migrate(ctx, loc)
	case "write":
		s, err := e.Open(ctx, loc, false)
		if err != nil {
			return err
		}
		defer s.Close()
		n, err := strconv.Atoi(os.Getenv(envN))
		if err != nil {
			return err
		}
		return writeMany(ctx, s, arg, 8, n)
	case "crash":
		s, err := e.Open(ctx, loc, false)
		if err != nil {
			return err
		}
		defer s.Close()
		return writeUntilKilled(ctx, s)
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// writeMany creates workers×each tenants named prefix-w-i, each with one
// key, from concurrent goroutines, and returns every error.
func writeMany(ctx context.Context, s store.Store, prefix string, workers, each int) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("%s-%d-%d", prefix, w, i)
				tn, err := s.CreateTenant(ctx, name)
				if err != nil {
					errs <- err
					continue
				}
				if _, err := s.CreateKey(ctx, store.NewKey{TenantID: tn.ID, Role: gyre.RoleAdmin, Hash: Hash(name)}); err != nil {
					errs <- err
					continue
				}
				// Reads alongside the writes.
				if _, err := s.KeyByHash(ctx, Hash(name)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// writeUntilKilled writes tenants with a key each from four goroutines,
// forever, printing "tenantID keyID" once both commits have returned.
func writeUntilKilled(ctx context.Context, s store.Store) error {
	var (
		mu  sync.Mutex
		n   int
		out = os.Stdout // unbuffered: each line is one write(2), atomic on a pipe
	)
	errc := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				mu.Lock()
				n++
				name := fmt.Sprintf("crash-%d", n)
				mu.Unlock()
				tn, err := s.CreateTenant(ctx, name)
				if err != nil {
					errc <- err
					return
				}
				k, err := s.CreateKey(ctx, store.NewKey{TenantID: tn.ID, Role: gyre.RoleReader, Hash: Hash(name)})
				if err != nil {
					errc <- err
					return
				}
				if _, err := fmt.Fprintf(out, "%s %s\n", tn.ID, k.ID); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	return <-errc
}

// child is a running child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr bytes.Buffer
}

func startChild(t *testing.T, mode, loc, arg string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envLoc+"="+loc, envArg+"="+arg)
	cmd.Env = append(cmd.Env, env...)
	c := &child{cmd: cmd}
	cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if c.stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", mode, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return c
}

// goAll releases children waiting in runChild.
func goAll(t *testing.T, cs []*child) {
	t.Helper()
	for _, c := range cs {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatalf("release child: %v", err)
		}
	}
}

// wait waits for c and fails the test unless it exited 0.
func (c *child) wait(t *testing.T, what string) {
	t.Helper()
	out, _ := io.ReadAll(c.stdout)
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("%s: %v\nstdout:\n%s\nstderr:\n%s", what, err, out, c.stderr.String())
	}
}

// RunEngine runs the engine-level tests: migrations (idempotent, safe from
// 16 goroutines and from several processes at once, refusing a newer
// schema), concurrent writers in one and in two processes, and a writer
// killed with SIGKILL losing no committed row.
func RunEngine(t *testing.T, e Engine) {
	t.Run("MigrateIdempotent", func(t *testing.T) { t.Parallel(); testMigrateIdempotent(t, e) })
	t.Run("NotMigrated", func(t *testing.T) { t.Parallel(); testNotMigrated(t, e) })
	t.Run("SchemaTooNew", func(t *testing.T) { t.Parallel(); testSchemaTooNew(t, e) })
	t.Run("MigrateRunTextToJSON", func(t *testing.T) { t.Parallel(); testMigrateRunTextToJSON(t, e) })
	t.Run("MigrateConcurrentGoroutines", func(t *testing.T) { t.Parallel(); testMigrateGoroutines(t, e) })
	t.Run("MigrateConcurrentProcesses", func(t *testing.T) { t.Parallel(); testMigrateProcesses(t, e) })
	t.Run("ConcurrentWriters", func(t *testing.T) { t.Parallel(); testConcurrentWriters(t, e) })
	t.Run("TwoProcessWriters", func(t *testing.T) { t.Parallel(); testTwoProcessWriters(t, e) })
	t.Run("KilledWriter", func(t *testing.T) { t.Parallel(); testKilledWriter(t, e) })
}

func raw(t *testing.T, e Engine, loc string) *sql.DB {
	t.Helper()
	db, err := e.Raw(loc)
	if err != nil {
		t.Fatalf("raw handle: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func open(t *testing.T, e Engine, loc string, migrate bool) store.Store {
	t.Helper()
	s, err := e.Open(t.Context(), loc, migrate)
	if err != nil {
		t.Fatalf("open (migrate %v): %v", migrate, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// checkSchemaOnce asserts the database is at e.Latest with each migration
// recorded exactly once, and that the schema works.
func checkSchemaOnce(t *testing.T, e Engine, loc string) {
	t.Helper()
	db := raw(t, e, loc)
	ctx := t.Context()
	var v int64
	if err := db.QueryRowContext(ctx, `SELECT MAX(version_id) FROM goose_db_version`).Scan(&v); err != nil {
		t.Fatalf("read version: %v", err)
	}
	if v != e.Latest {
		t.Errorf("schema version %d, want %d", v, e.Latest)
	}
	var dups int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT version_id FROM goose_db_version
		GROUP BY version_id HAVING COUNT(*) > 1) d`).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	if dups != 0 {
		t.Errorf("%d migration versions recorded more than once", dups)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tenants`).Scan(&n); err != nil {
		t.Errorf("tenants table: %v", err)
	}
}

func testMigrateIdempotent(t *testing.T, e Engine) {
	loc := e.Fresh(t)
	ctx := t.Context()
	if err := e.Migrate(ctx, loc); err != nil {
		t.Fatalf("first Migrate: %v", err)
	}
	checkSchemaOnce(t, e, loc)
	var rows int
	count := func() int {
		var n int
		if err := raw(t, e, loc).QueryRowContext(ctx, `SELECT COUNT(*) FROM goose_db_version`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	rows = count()
	if err := e.Migrate(ctx, loc); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	s := open(t, e, loc, true)
	if m, ok := s.(interface{ Migrate(context.Context) error }); ok {
		if err := m.Migrate(ctx); err != nil {
			t.Fatalf("Store.Migrate: %v", err)
		}
	}
	checkSchemaOnce(t, e, loc)
	if got := count(); got != rows {
		t.Errorf("version table has %d rows after migrating again, want %d (no-op)", got, rows)
	}
	// Data survives re-migration.
	mustTenant(t, s, "acme")
	if err := e.Migrate(ctx, loc); err != nil {
		t.Fatalf("third Migrate: %v", err)
	}
	if _, err := open(t, e, loc, false).TenantByName(ctx, "acme"); err != nil {
		t.Errorf("tenant after re-migrating: %v", err)
	}
}

func testNotMigrated(t *testing.T, e Engine) {
	loc := e.Fresh(t)
	ctx := t.Context()
	if s, err := e.Open(ctx, loc, false); !errors.Is(err, store.ErrNotMigrated) {
		if err == nil {
			_ = s.Close()
		}
		t.Fatalf("Open(fresh, no migrate) error = %v, want ErrNotMigrated", err)
	}
	if err := e.Migrate(ctx, loc); err != nil {
		t.Fatal(err)
	}
	s := open(t, e, loc, false)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping when migrated: %v", err)
	}
	// Forget the latest migration: the store is no longer ready.
	db := raw(t, e, loc)
	if _, err := db.ExecContext(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, e.Latest); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrNotMigrated) {
		t.Errorf("Ping after losing a migration = %v, want ErrNotMigrated", err)
	}
	if s2, err := e.Open(ctx, loc, false); !errors.Is(err, store.ErrNotMigrated) {
		if err == nil {
			_ = s2.Close()
		}
		t.Errorf("Open(behind, no migrate) error = %v, want ErrNotMigrated", err)
	}
}

func testSchemaTooNew(t *testing.T, e Engine) {
	loc := e.Fresh(t)
	ctx := t.Context()
	if err := e.Migrate(ctx, loc); err != nil {
		t.Fatal(err)
	}
	s := open(t, e, loc, false)
	db := raw(t, e, loc)
	newer := e.Latest + 1
	if _, err := db.ExecContext(ctx,
		`INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, $2)`, newer, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Ping on a newer schema = %v, want ErrSchemaTooNew", err)
	}
	for _, migrate := range []bool{false, true} {
		if s2, err := e.Open(ctx, loc, migrate); !errors.Is(err, store.ErrSchemaTooNew) {
			if err == nil {
				_ = s2.Close()
			}
			t.Errorf("Open(newer schema, migrate %v) error = %v, want ErrSchemaTooNew", migrate, err)
		}
	}
	if err := e.Migrate(ctx, loc); !errors.Is(err, store.ErrSchemaTooNew) {
		t.Errorf("Migrate(newer schema) error = %v, want ErrSchemaTooNew", err)
	}
	var v int64
	if err := db.QueryRowContext(ctx, `SELECT MAX(version_id) FROM goose_db_version`).Scan(&v); err != nil || v != newer {
		t.Errorf("schema version after refusing = %d, %v; want %d untouched", v, err, newer)
	}
}

func testMigrateGoroutines(t *testing.T, e Engine) {
	loc := e.Fresh(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = e.Migrate(t.Context(), loc)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migrator %d: %v", i, err)
		}
	}
	checkSchemaOnce(t, e, loc)
}

func testMigrateProcesses(t *testing.T, e Engine) {
	loc := e.Fresh(t)
	const n = 4
	var cs []*child
	for range n {
		cs = append(cs, startChild(t, "migrate", loc, ""))
	}
	goAll(t, cs)
	for i, c := range cs {
		c.wait(t, fmt.Sprintf("migrating process %d", i))
	}
	checkSchemaOnce(t, e, loc)
}

func testConcurrentWriters(t *testing.T, e Engine) {
	loc := e.Fresh(t)
	s := open(t, e, loc, true)
	const workers, each = 32, 8
	if err := writeMany(t.Context(), s, "w", workers, each); err != nil {
		t.Fatalf("concurrent writers: %v", err)
	}
	tenants, err := s.ListTenants(t.Context())
	if err != nil || len(tenants) != workers*each {
		t.Fatalf("ListTenants = %d, %v; want %d", len(tenants), err, workers*each)
	}
}

func testTwoProcessWriters(t *testing.T, e Engine) {
	loc := e.Fresh(t)
	if err := e.Migrate(t.Context(), loc); err != nil {
		t.Fatal(err)
	}
	const each = 12 // per goroutine; each process runs 8
	cs := []*child{
		startChild(t, "write", loc, "p1", envN+"="+strconv.Itoa(each)),
		startChild(t, "write", loc, "p2", envN+"="+strconv.Itoa(each)),
	}
	goAll(t, cs)
	for i, c := range cs {
		c.wait(t, fmt.Sprintf("writing process %d", i+1))
	}
	s := open(t, e, loc, false)
	tenants, err := s.ListTenants(t.Context())
	if err != nil || len(tenants) != 2*8*each {
		t.Fatalf("ListTenants = %d, %v; want %d", len(tenants), err, 2*8*each)
	}
}

func testKilledWriter(t *testing.T, e Engine) {
	loc := e.Fresh(t)
	if err := e.Migrate(t.Context(), loc); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, "crash", loc, "")
	goAll(t, []*child{c})

	const killAfter = 100
	type row struct{ tenant, key string }
	var rows []row
	sc := bufio.NewScanner(c.stdout)
	killed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			t.Fatalf("malformed line from the writer: %q", sc.Text())
		}
		rows = append(rows, row{f[0], f[1]})
		if len(rows) == killAfter && !killed {
			// Mid-stream: the writer has transactions in flight.
			if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatalf("kill writer: %v", err)
			}
			killed = true
		}
	}
	err := c.cmd.Wait()
	if !killed {
		t.Fatalf("writer stopped after %d rows: %v\nstderr:\n%s", len(rows), err, c.stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer did not die of SIGKILL: %v\nstderr:\n%s", err, c.stderr.String())
	}

	s := open(t, e, loc, false) // reopens cleanly, schema intact
	ctx := t.Context()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after the crash: %v", err)
	}
	for _, r := range rows {
		if _, err := s.TenantByID(ctx, r.tenant); err != nil {
			t.Errorf("committed tenant %s lost: %v", r.tenant, err)
			continue
		}
		keys, _, err := s.ListKeys(ctx, r.tenant, store.Page{})
		if err != nil || len(keys) != 1 || keys[0].ID != r.key {
			t.Errorf("committed key %s of tenant %s lost: %+v, %v", r.key, r.tenant, keys, err)
		}
	}
	t.Logf("%d acknowledged rows before SIGKILL, all present", len(rows))
	if e.Check != nil {
		e.Check(t, loc)
	}
	// The store takes writes again.
	mustTenant(t, s, "after-crash")
}
