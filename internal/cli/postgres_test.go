package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store/storeopen"
	"github.com/gyrehq/gyre/internal/store/storetest"
)

// On PostgreSQL, bootstrap creates a key only with
// --bootstrap-admin-key-file (SPEC §3).
func TestBootstrapPostgres(t *testing.T) {
	t.Parallel()
	url := storetest.PostgresURL(t)
	db := storetest.SearchPathURL(t, url, storetest.NewPostgresSchema(t, url))
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	st, err := storeopen.Open(ctx, storeopen.Options{DB: db, Clock: clock.Real{}, Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := Defaults()
	c.DB = db
	c.Data = t.TempDir()

	if err := bootstrap(ctx, st, c, log); err != nil {
		t.Fatal(err)
	}
	if ts, err := st.ListTenants(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("bootstrap without the flag created tenants: %v %v", ts, err)
	}
	if _, err := os.Stat(filepath.Join(c.Data, "admin.key")); !os.IsNotExist(err) {
		t.Fatal("bootstrap on PostgreSQL wrote <data>/admin.key")
	}

	c.BootstrapAdminKeyFile = filepath.Join(t.TempDir(), "admin.key")
	if err := bootstrap(ctx, st, c, log); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(c.BootstrapAdminKeyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if ts, err := st.ListTenants(ctx); err != nil || len(ts) != 1 || ts[0].Name != "default" {
		t.Fatalf("tenants: %v %v", ts, err)
	}

	// A second replica with its own key file path creates nothing.
	other := Defaults()
	other.DB = db
	other.BootstrapAdminKeyFile = filepath.Join(t.TempDir(), "admin.key")
	if err := bootstrap(ctx, st, other, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other.BootstrapAdminKeyFile); !os.IsNotExist(err) {
		t.Fatal("a second bootstrap wrote a key file")
	}
}
