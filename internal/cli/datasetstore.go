package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/api"
	"github.com/gyrehq/gyre/internal/blobstore"
	"github.com/gyrehq/gyre/internal/dataset/build"
	"github.com/gyrehq/gyre/internal/store"
)

// directDatasetLease is the default lease of a dataset build run by gyre
// dataset export on the store: short, so that a running gyre serve takes
// over the build of an export that died within about a minute.
const directDatasetLease = time.Minute

// storeDatasets is gyre dataset on the store directly: one tenant of the
// store and the blob store, as gyre serve opens them.
type storeDatasets struct {
	st     store.Store
	blobs  *blobstore.Store
	tenant gyre.Tenant
	log    *slog.Logger
	stderr io.Writer
}

// withDatasetStore opens the store, the tenant --tenant and the blob
// store --blob (or $GYRE_BLOB) and runs f with them.
func (a *app) withDatasetStore(cmd *cobra.Command, f func(ctx context.Context, ds *storeDatasets) error) error {
	c, _, err := a.config(cmd, false)
	if err != nil {
		return err
	}
	fs := cmd.Flags()
	tenant, _ := fs.GetString("tenant")
	blobURL, _ := fs.GetString("blob")
	a.envDefault(fs, "blob", "GYRE_BLOB", &blobURL)
	return a.withStore(cmd, func(ctx context.Context, st store.Store) error {
		t, err := tenantByName(ctx, st, tenant)
		if err != nil {
			return err
		}
		blobs, err := blobstore.Open(ctx, blobURL, c.Data)
		if err != nil {
			return fmt.Errorf("--blob: %w", err)
		}
		defer blobs.Close()
		return f(ctx, &storeDatasets{st: st, blobs: blobs, tenant: t, log: a.logger(c), stderr: a.stderr})
	})
}

// datasetFlagOf names the gyre dataset export flag a creation request's
// JSON pointer is about.
func datasetFlagOf(pointer string) string {
	switch {
	case pointer == "/agent_id":
		return "--agent"
	case pointer == "/format":
		return "--format"
	case strings.HasPrefix(pointer, "/batch_ids"):
		return "--batch"
	case pointer == "":
		return "the request"
	}
	return "--" + strings.ReplaceAll(strings.TrimPrefix(pointer, "/"), "_", "-")
}

// export creates the dataset req asks for through the API's own path,
// builds it here under its build job's lease, and writes PATH and
// PATH.manifest.json.
func (ds *storeDatasets) export(ctx context.Context, req build.Request, out string, lease, wait time.Duration) error {
	d, err := build.Create(ctx, ds.st, ds.tenant.ID, req)
	var ge *gyre.Error
	if errors.As(err, &ge) && ge.Code == gyre.CodeInvalidBody {
		return usagef("%s: %s", datasetFlagOf(ge.Pointer), ge.Message)
	}
	if errors.As(err, &ge) {
		return fmt.Errorf("%s (tenant %s)", ge.Message, ds.tenant.Name)
	}
	if err != nil {
		return fmt.Errorf("create dataset: %w", err)
	}
	fmt.Fprintf(ds.stderr, "dataset %s: %d rollouts selected, building\n", d.ID, d.Members)
	bar := newBuildBar(ds.stderr, d.Members)
	var p build.Progress
	stop := bar.follow(&p)
	err = build.New(ds.st, ds.blobs, ds.log).BuildNow(ctx, directOwner(), d.ID, lease, &p)
	stop()
	if errors.Is(err, build.ErrHeld) {
		// A gyre serve took the job between its creation and our claim:
		// it builds the dataset; wait for it.
		fmt.Fprintf(ds.stderr, "dataset %s: gyre serve is building it, waiting\n", d.ID)
		err = ds.waitBuilt(ctx, d.ID, wait, bar)
	}
	if d2, gerr := ds.st.GetDataset(ctx, ds.tenant.ID, d.ID); gerr == nil {
		d = d2
	} else if err == nil {
		err = gerr
	}
	if err == nil && d.State == store.DatasetReady {
		var m struct {
			Rows int64 `json:"rows"`
		}
		_ = json.Unmarshal(d.Manifest, &m)
		bar.set(int64(d.Members), m.Rows)
	}
	bar.finish(err == nil && d.State == store.DatasetReady)
	if err != nil {
		return fmt.Errorf("dataset %s: %w", d.ID, err)
	}
	if err := notReadyError(d); err != nil {
		return err
	}
	return ds.write(ctx, d, out)
}

// directOwner names this process as a job's lease holder, for the jobs
// table's locked_by.
func directOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("gyre-dataset-export:%s:%d", host, os.Getpid())
}

// waitBuilt polls the store until the dataset is no longer building,
// moving the bar with the progress the building process records.
func (ds *storeDatasets) waitBuilt(ctx context.Context, id string, limit time.Duration, bar *buildBar) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		d, err := ds.st.GetDataset(ctx, ds.tenant.ID, id)
		if err != nil {
			return err
		}
		if d.State != store.DatasetBuilding {
			return nil
		}
		if d.Progress != nil {
			bar.set(d.Progress.Rollouts, d.Progress.Rows)
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("still building after %s", limit)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// notReadyError says why a dataset has no file, nil when it is ready.
func notReadyError(d store.Dataset) error {
	switch d.State {
	case store.DatasetReady:
		return nil
	case store.DatasetFailed:
		reason := ""
		if d.Reason != nil {
			reason = ": " + *d.Reason
		}
		return fmt.Errorf("dataset %s failed%s", d.ID, reason)
	}
	return fmt.Errorf("dataset %s is %s, not ready", d.ID, d.State)
}

// write writes a ready dataset's file to out, checked against its
// SHA-256 as it is read, and its manifest to out.manifest.json (the bytes
// GET /api/v1/datasets/{id}/manifest answers), each through a temporary
// file renamed into place.
func (ds *storeDatasets) write(ctx context.Context, d store.Dataset, out string) error {
	if d.BlobKey == nil || d.FileSHA256 == nil {
		return fmt.Errorf("dataset %s is ready but has no file", d.ID)
	}
	rc, err := ds.blobs.GetContent(ctx, *d.BlobKey, *d.FileSHA256)
	if err != nil {
		return fmt.Errorf("dataset %s file: %w", d.ID, err)
	}
	defer rc.Close()
	if err := writeAtomically(out, rc); err != nil {
		return err
	}
	if err := writeAtomically(out+".manifest.json", bytes.NewReader(append(bytes.Clone(d.Manifest), '\n'))); err != nil {
		return err
	}
	var m struct {
		Rows int `json:"rows"`
	}
	_ = json.Unmarshal(d.Manifest, &m)
	fmt.Fprintf(ds.stderr, "dataset %s: %d rows written to %s\n", d.ID, m.Rows, out)
	return nil
}

// get reads one of the tenant's datasets by id.
func (ds *storeDatasets) get(ctx context.Context, id string) (store.Dataset, error) {
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return store.Dataset{}, usagef("%q is not a dataset id", id)
	}
	d, err := ds.st.GetDataset(ctx, ds.tenant.ID, id)
	if errors.Is(err, store.ErrNotFound) {
		return d, fmt.Errorf("no dataset %s in tenant %s", id, ds.tenant.Name)
	}
	return d, err
}

// download writes a ready dataset to out and out.manifest.json.
func (ds *storeDatasets) download(ctx context.Context, id, out string) error {
	d, err := ds.get(ctx, id)
	if err != nil {
		return err
	}
	if err := notReadyError(d); err != nil {
		return err
	}
	return ds.write(ctx, d, out)
}

// datasetJSON is d as the API shows it, without a trailing newline.
func datasetJSON(d store.Dataset) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(api.NewDatasetJSON(d)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// show prints a dataset with its manifest, as GET /api/v1/datasets/{id}.
func (ds *storeDatasets) show(ctx context.Context, id string, w io.Writer) error {
	d, err := ds.get(ctx, id)
	if err != nil {
		return err
	}
	b, err := datasetJSON(d)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// list prints the tenant's datasets, newest first, one line each.
func (ds *storeDatasets) list(ctx context.Context, w io.Writer) error {
	cursor := ""
	for {
		page, next, err := ds.st.ListDatasets(ctx, ds.tenant.ID, store.Page{Limit: 500, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("list datasets: %w", err)
		}
		for _, d := range page {
			b, err := datasetJSON(d)
			if err != nil {
				return err
			}
			if err := writeDatasetLine(w, b); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		cursor = next
	}
}
