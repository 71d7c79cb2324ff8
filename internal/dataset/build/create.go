package build

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/dataset"
	"github.com/gyrehq/gyre/internal/store"
)

// Request is what a dataset's creator asks for: the body of POST
// /api/v1/datasets, or the flags of gyre dataset export on the store.
type Request struct {
	AgentID string
	Format  dataset.Format
	Filters dataset.Filters
}

// Create validates r, then freezes a new dataset of the tenant (its
// rollout ids, the verdict set each was graded with, and which of their
// tasks are held out because their case gates a promotion, SPEC §10) and
// queues its build job. It is the one way a dataset is made, by the API and by gyre
// dataset export on the store alike, so both freeze the same selection
// and record the same filters. Bad input is a *gyre.Error pointing at the
// request member at fault (invalid_body); an agent never seen in the
// tenant is not_found. Nothing is stored on either.
func Create(ctx context.Context, st store.DatasetStore, tenantID string, r Request) (store.Dataset, error) {
	bad := func(ptr, format string, args ...any) error {
		return gyre.Errorf(gyre.CodeInvalidBody, format, args...).AtPointer(ptr)
	}
	if r.AgentID == "" {
		return store.Dataset{}, bad("/agent_id", "agent_id is required")
	}
	if err := flywheel.ValidateAgentID(r.AgentID); err != nil {
		return store.Dataset{}, bad("/agent_id", "agent_id is not a valid flywheel/1 agent_id: %v", err)
	}
	if r.Format == "" {
		return store.Dataset{}, bad("/format", "format is required: one of sft, dpo, rl, atif")
	}
	for i, id := range r.Filters.BatchIDs {
		if u, err := uuid.Parse(id); err != nil || u.String() != id {
			return store.Dataset{}, bad("/batch_ids/"+strconv.Itoa(i), "batch_ids must hold batch ids")
		}
	}
	// Stored times have microseconds; the filters recorded (and shown in
	// the manifest) are the ones the store applies.
	f := r.Filters
	for _, t := range []**time.Time{&f.Since, &f.Until} {
		if *t != nil {
			v := (*t).UTC().Truncate(time.Microsecond)
			*t = &v
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return store.Dataset{}, err
	}
	sel := dataset.Selection{ID: id.String(), AgentID: r.AgentID, Format: r.Format, Filters: f}
	if err := sel.Validate(); err != nil {
		return store.Dataset{}, err
	}
	filters, err := json.Marshal(f)
	if err != nil {
		return store.Dataset{}, err
	}
	d, err := st.CreateDataset(ctx, store.NewDataset{ID: sel.ID, TenantID: tenantID, AgentID: r.AgentID,
		Format: string(r.Format), Filters: filters, Since: f.Since, Until: f.Until, BatchIDs: f.BatchIDs})
	if errors.Is(err, store.ErrNotFound) {
		return store.Dataset{}, gyre.Errorf(gyre.CodeNotFound, "no agent %s in this tenant", r.AgentID)
	}
	return d, err
}
