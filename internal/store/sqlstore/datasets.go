package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre/internal/store"
)

const datasetColumns = `id, tenant_id, agent_id, format, filters, holdout, state, reason, members,
	file_sha256, file_bytes, blob_key, manifest, created_us, built_us, progress_rollouts, progress_rows`

func scanDataset(row interface{ Scan(...any) error }) (store.Dataset, error) {
	var (
		d                store.Dataset
		filters, holdout string
		manifest         sql.NullString
		created          int64
		built, fileBytes sql.NullInt64
		sha, key, reason sql.NullString
		pRollouts, pRows sql.NullInt64
	)
	if err := row.Scan(&d.ID, &d.TenantID, &d.AgentID, &d.Format, &filters, &holdout, &d.State, &reason,
		&d.Members, &sha, &fileBytes, &key, &manifest, &created, &built, &pRollouts, &pRows); err != nil {
		return store.Dataset{}, err
	}
	d.Filters = json.RawMessage(filters)
	if err := json.Unmarshal([]byte(holdout), &d.HoldoutTaskIDs); err != nil {
		return store.Dataset{}, fmt.Errorf("dataset holdout: %w", err)
	}
	if reason.Valid {
		d.Reason = &reason.String
	}
	if sha.Valid {
		d.FileSHA256 = &sha.String
	}
	if fileBytes.Valid {
		d.FileBytes = &fileBytes.Int64
	}
	if key.Valid {
		d.BlobKey = &key.String
	}
	if manifest.Valid {
		d.Manifest = json.RawMessage(manifest.String)
	}
	d.CreatedAt = store.FromMicros(created)
	d.BuiltAt = timePtr(built)
	if pRollouts.Valid && pRows.Valid {
		d.Progress = &store.DatasetProgress{Rollouts: pRollouts.Int64, Rows: pRows.Int64}
	}
	return d, nil
}

// CreateDataset freezes the selection with one INSERT … SELECT, so the
// membership never passes through memory however many rollouts match.
// Each member copies the rollout's latest verdict set, training grade and
// reward as they are inside the transaction: a later regrade writes a new
// verdict set and changes the rollout, never the copy.
func (s *Store) CreateDataset(ctx context.Context, nd store.NewDataset) (store.Dataset, error) {
	if len(nd.Filters) == 0 || !json.Valid(nd.Filters) {
		return store.Dataset{}, errors.New("create dataset: filters are not JSON")
	}
	var out store.Dataset
	err := s.write(ctx, func(tx *sql.Tx) error {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM agents WHERE tenant_id = $1 AND agent_id = $2`,
			nd.TenantID, nd.AgentID).Scan(&one); err != nil {
			return notFound("agent", err)
		}
		now := s.now()
		if _, err := tx.ExecContext(ctx, `INSERT INTO datasets (id, tenant_id, agent_id, format, filters, holdout,
			state, members, created_us) VALUES ($1, $2, $3, $4, $5, '[]', $6, 0, $7)`,
			nd.ID, nd.TenantID, nd.AgentID, nd.Format, string(nd.Filters),
			store.DatasetBuilding, now); err != nil {
			if s.d.IsUniqueViolation(err) {
				return fmt.Errorf("dataset %s: %w", nd.ID, store.ErrConflict)
			}
			return fmt.Errorf("insert dataset: %w", err)
		}
		latest := func(col string) string {
			return `(SELECT v.` + col + ` FROM verdict_sets v WHERE v.subject_kind = 'rollout' AND v.subject_id = r.id
				ORDER BY v.created_us DESC, v.id DESC LIMIT 1)`
		}
		q := `INSERT INTO dataset_rollouts (dataset_id, rollout_id, batch_id, task_id, group_id, verdicts,
			grader_versions, training_grade, not_training_grade, reward)
			SELECT $1, r.id, r.batch_id, r.task_id, r.group_id, ` + latest("verdicts") + `, ` + latest("grader_versions") + `,
			r.training_grade, r.not_training_grade, r.reward
			FROM rollouts r WHERE r.tenant_id = $2 AND r.agent_id = $3 AND r.submitted_us IS NOT NULL`
		args := []any{nd.ID, nd.TenantID, nd.AgentID}
		if nd.Since != nil {
			args = append(args, store.Micros(*nd.Since))
			q += ` AND r.submitted_us >= $` + strconv.Itoa(len(args))
		}
		if nd.Until != nil {
			args = append(args, store.Micros(*nd.Until))
			q += ` AND r.submitted_us < $` + strconv.Itoa(len(args))
		}
		if nd.BatchIDs != nil {
			if len(nd.BatchIDs) == 0 {
				q += ` AND 1 = 0`
			} else {
				q += ` AND r.batch_id IN (` + placeholders(len(args)+1, len(nd.BatchIDs)) + `)`
				for _, b := range nd.BatchIDs {
					args = append(args, b)
				}
			}
		}
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("freeze dataset members: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("freeze dataset members: %w", err)
		}
		holdout, err := heldOutTasks(ctx, tx, nd)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE datasets SET members = $2, holdout = $3 WHERE id = $1`,
			nd.ID, n, string(holdout)); err != nil {
			return fmt.Errorf("count dataset members: %w", err)
		}
		if err := s.enqueue(ctx, tx, store.JobDatasetBuild, nd.ID, now); err != nil {
			return err
		}
		out, err = scanDataset(tx.QueryRowContext(ctx, `SELECT `+datasetColumns+` FROM datasets WHERE id = $1`, nd.ID))
		return err
	})
	if err != nil {
		return store.Dataset{}, fmt.Errorf("create dataset: %w", err)
	}
	return out, nil
}

// caseKey is a task's identity across the batches that each make their
// own task ids (SPEC §10): a task made from a production turn is that
// turn of its agent, a suite task is its suite's case (whatever the
// version), and any other task only itself. The three columns (a list
// for a SELECT; parenthesised they are a row value) are never NULL, so a
// row-value IN compares them whole; t is the tasks alias.
func caseKey(t string) string {
	turn := t + `.source_turn_id IS NOT NULL`
	suite := t + `.suite_name IS NOT NULL`
	return `CASE WHEN ` + turn + ` THEN 'turn' WHEN ` + suite + ` THEN 'case' ELSE 'task' END,
		CASE WHEN ` + turn + ` THEN COALESCE(` + t + `.source_agent_id, '') WHEN ` + suite + ` THEN ` + t + `.suite_name ELSE ` + t + `.id END,
		CASE WHEN ` + turn + ` THEN ` + t + `.source_turn_id WHEN ` + suite + ` THEN ` + t + `.case_id ELSE ` + t + `.id END`
}

// heldOutTasks returns, as a sorted JSON array, the tasks of the new
// dataset's frozen members whose case gates a promotion of the same
// tenant and agent: a task of any batch a promotion made, matched by
// caseKey, so a later batch of the same suite (new task ids) or a new
// task made from the same turn is held out too. Both sides are one query
// over indexed joins; only the distinct held-out task ids come back.
func heldOutTasks(ctx context.Context, tx *sql.Tx, nd store.NewDataset) ([]byte, error) {
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT m.task_id FROM dataset_rollouts m
		JOIN tasks t ON t.id = m.task_id
		WHERE m.dataset_id = $1 AND (`+caseKey("t")+`) IN (
			SELECT `+caseKey("pt")+` FROM batches pb
			JOIN rollouts pr ON pr.batch_id = pb.id
			JOIN tasks pt ON pt.id = pr.task_id
			WHERE pb.tenant_id = $2 AND pb.agent_id = $3 AND pb.promotion_id IS NOT NULL)`, nd.ID, nd.TenantID, nd.AgentID)
	if err != nil {
		return nil, fmt.Errorf("held-out tasks: %w", err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("held-out tasks: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("held-out tasks: %w", err)
	}
	slices.Sort(ids) // in Go: the engines' collations may order text differently
	return json.Marshal(ids)
}

// GetDataset returns one of the tenant's datasets.
func (s *Store) GetDataset(ctx context.Context, tenantID, id string) (store.Dataset, error) {
	d, err := scanDataset(s.reader.QueryRowContext(ctx, `SELECT `+datasetColumns+` FROM datasets
		WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if err != nil {
		return store.Dataset{}, notFound("dataset", err)
	}
	return d, nil
}

// DatasetByID returns a dataset whatever its tenant.
func (s *Store) DatasetByID(ctx context.Context, id string) (store.Dataset, error) {
	d, err := scanDataset(s.reader.QueryRowContext(ctx, `SELECT `+datasetColumns+` FROM datasets WHERE id = $1`, id))
	if err != nil {
		return store.Dataset{}, notFound("dataset", err)
	}
	return d, nil
}

// ListDatasets lists the tenant's datasets, newest first.
func (s *Store) ListDatasets(ctx context.Context, tenantID string, p store.Page) ([]store.Dataset, string, error) {
	return s.listDatasets(ctx, tenantID, store.DatasetFilter{}, p, datasetColumns)
}

// datasetBriefColumns are datasetColumns with a null manifest.
var datasetBriefColumns = strings.Replace(datasetColumns, "manifest,", "NULL AS manifest,", 1)

// FilterDatasets lists the tenant's datasets that match f, newest first
// (keyset on the UUIDv7 id), without their manifests. An unfiltered list
// keeps ListDatasets' cursor scope, so its cursors stay valid.
func (s *Store) FilterDatasets(ctx context.Context, tenantID string, f store.DatasetFilter, p store.Page) ([]store.Dataset, string, error) {
	return s.listDatasets(ctx, tenantID, f, p, datasetBriefColumns)
}

func (s *Store) listDatasets(ctx context.Context, tenantID string, f store.DatasetFilter, p store.Page, columns string) ([]store.Dataset, string, error) {
	switch f.State {
	case "", store.DatasetBuilding, store.DatasetReady, store.DatasetFailed:
	default:
		return nil, "", fmt.Errorf("list datasets: unknown state %q", f.State)
	}
	cur := listCursor(tenantID, "datasets")
	if f != (store.DatasetFilter{}) {
		cur = listCursor(tenantID, "datasets", f.AgentID, f.State,
			strconv.FormatInt(micros(f.Since), 10), strconv.FormatInt(micros(f.Until), 10))
	}
	after, err := cur.decodeID(p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list datasets: %w", err)
	}
	n := limit(p)
	q := `SELECT ` + columns + ` FROM datasets WHERE tenant_id = $1`
	args := []any{tenantID}
	arg := func(cond string, v any) {
		args = append(args, v)
		q += ` AND ` + strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args)))
	}
	if f.AgentID != "" {
		arg(`agent_id = ?`, f.AgentID)
	}
	if f.State != "" {
		arg(`state = ?`, f.State)
	}
	if !f.Since.IsZero() {
		arg(`created_us >= ?`, f.Since.UnixMicro())
	}
	if !f.Until.IsZero() {
		arg(`created_us < ?`, f.Until.UnixMicro())
	}
	if after != "" {
		arg(`id < ?`, after)
	}
	q += ` ORDER BY id DESC LIMIT ` + strconv.Itoa(n+1)
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list datasets: %w", err)
	}
	defer rows.Close()
	out := make([]store.Dataset, 0, n)
	for rows.Next() {
		d, err := scanDataset(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list datasets: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list datasets: %w", err)
	}
	var next string
	if len(out) > n {
		out = out[:n]
		next = cur.encode(out[n-1].ID)
	}
	return out, next, nil
}

const memberColumns = `rollout_id, batch_id, task_id, group_id, verdicts, grader_versions, training_grade,
	not_training_grade, reward`

// DatasetMembers pages the frozen members by rollout id (keyset on the
// primary key).
func (s *Store) DatasetMembers(ctx context.Context, datasetID, after string, n int) ([]store.DatasetMember, error) {
	return s.members(ctx, `SELECT `+memberColumns+` FROM dataset_rollouts WHERE dataset_id = $1 AND rollout_id > $2
		ORDER BY rollout_id LIMIT $3`, datasetID, after, n)
}

// DatasetGroupMembers pages the frozen members by group, then rollout id.
func (s *Store) DatasetGroupMembers(ctx context.Context, datasetID, afterGroup, afterRollout string, n int) ([]store.DatasetMember, error) {
	return s.members(ctx, `SELECT `+memberColumns+` FROM dataset_rollouts WHERE dataset_id = $1
		AND (group_id > $2 OR (group_id = $2 AND rollout_id > $3)) ORDER BY group_id, rollout_id LIMIT $4`,
		datasetID, afterGroup, afterRollout, n)
}

func (s *Store) members(ctx context.Context, q string, args ...any) ([]store.DatasetMember, error) {
	rows, err := s.reader.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("dataset members: %w", err)
	}
	defer rows.Close()
	var out []store.DatasetMember
	for rows.Next() {
		var (
			m                           store.DatasetMember
			verdicts, versions, reasons sql.NullString
			grade                       sql.NullBool
			reward                      sql.NullFloat64
		)
		if err := rows.Scan(&m.RolloutID, &m.BatchID, &m.TaskID, &m.GroupID, &verdicts, &versions, &grade,
			&reasons, &reward); err != nil {
			return nil, fmt.Errorf("dataset members: %w", err)
		}
		if verdicts.Valid {
			m.Verdicts = json.RawMessage(verdicts.String)
		}
		if versions.Valid {
			m.GraderVersions = json.RawMessage(versions.String)
		}
		if grade.Valid {
			m.TrainingGrade = &grade.Bool
		}
		if reasons.Valid && reasons.String != "" {
			if err := json.Unmarshal([]byte(reasons.String), &m.NotTrainingGrade); err != nil {
				return nil, fmt.Errorf("dataset member reasons: %w", err)
			}
		}
		if reward.Valid {
			m.Reward = &reward.Float64
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("dataset members: %w", err)
	}
	return out, nil
}

// FinishDataset records a build's outcome once: only a dataset still
// building changes.
func (s *Store) FinishDataset(ctx context.Context, b store.DatasetBuilt) (store.Dataset, error) {
	if b.State != store.DatasetReady && b.State != store.DatasetFailed {
		return store.Dataset{}, fmt.Errorf("finish dataset: state %q is not ready or failed", b.State)
	}
	var out store.Dataset
	err := s.write(ctx, func(tx *sql.Tx) error {
		var sha, key, manifest any
		var size any
		if b.State == store.DatasetReady {
			if len(b.Manifest) == 0 || !json.Valid(b.Manifest) {
				return errors.New("manifest is not JSON")
			}
			sha, key, manifest, size = b.FileSHA256, b.BlobKey, string(b.Manifest), b.FileBytes
		}
		if _, err := tx.ExecContext(ctx, `UPDATE datasets SET state = $2, reason = $3, file_sha256 = $4,
			file_bytes = $5, blob_key = $6, manifest = $7, built_us = $8 WHERE id = $1 AND state = $9`,
			b.ID, b.State, b.Reason, sha, size, key, manifest, s.now(), store.DatasetBuilding); err != nil {
			return err
		}
		d, err := scanDataset(tx.QueryRowContext(ctx, `SELECT `+datasetColumns+` FROM datasets WHERE id = $1`, b.ID))
		if err != nil {
			return notFound("dataset", err)
		}
		out = d
		return nil
	})
	if err != nil {
		return store.Dataset{}, fmt.Errorf("finish dataset: %w", err)
	}
	return out, nil
}

// SetDatasetProgress records a running build's progress on a dataset
// still building.
func (s *Store) SetDatasetProgress(ctx context.Context, id string, p store.DatasetProgress) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE datasets SET progress_rollouts = $2, progress_rows = $3
			WHERE id = $1 AND state = $4`, id, p.Rollouts, p.Rows, store.DatasetBuilding)
		return err
	})
	if err != nil {
		return fmt.Errorf("dataset progress: %w", err)
	}
	return nil
}
