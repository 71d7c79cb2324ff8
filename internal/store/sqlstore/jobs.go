package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

// enqueue makes a job due at now inside tx, resetting one that exists
// (even one running: its claim token no longer matches, so the running
// claim cannot remove it).
func (s *Store) enqueue(ctx context.Context, tx *sql.Tx, kind, subjectID string, now int64) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO jobs (kind, subject_id, run_after_us, created_us) VALUES ($1, $2, $3, $3)
		ON CONFLICT (kind, subject_id) DO UPDATE SET run_after_us = excluded.run_after_us, attempts = 0,
		locked_by = NULL, locked_until_us = NULL, claim_token = NULL, last_error = NULL`, kind, subjectID, now); err != nil {
		return fmt.Errorf("enqueue %s job: %w", kind, err)
	}
	return nil
}

// EnqueueJob makes a job due now.
func (s *Store) EnqueueJob(ctx context.Context, kind, subjectID string) error {
	return s.write(ctx, func(tx *sql.Tx) error { return s.enqueue(ctx, tx, kind, subjectID, s.now()) })
}

// ClaimJobs leases up to n due jobs of the given kinds.
func (s *Store) ClaimJobs(ctx context.Context, owner string, kinds []string, n int, lease time.Duration) ([]store.Job, error) {
	if n < 1 || len(kinds) == 0 {
		return nil, nil
	}
	var jobs []store.Job
	err := s.write(ctx, func(tx *sql.Tx) error {
		jobs = nil
		now := s.now()
		args := []any{now}
		for _, k := range kinds {
			args = append(args, k)
		}
		args = append(args, n)
		rows, err := tx.QueryContext(ctx, `SELECT r.id, r.kind, r.subject_id, r.attempts FROM jobs r
			WHERE r.run_after_us <= $1 AND (r.locked_until_us IS NULL OR r.locked_until_us <= $1)
			AND r.kind IN (`+placeholders(2, len(kinds))+`)
			ORDER BY r.run_after_us, r.id LIMIT $`+fmt.Sprint(len(kinds)+2)+s.d.SkipLocked, args...)
		if err != nil {
			return fmt.Errorf("pick jobs: %w", err)
		}
		for rows.Next() {
			var j store.Job
			if err := rows.Scan(&j.ID, &j.Kind, &j.SubjectID, &j.Attempts); err != nil {
				rows.Close()
				return fmt.Errorf("pick jobs: %w", err)
			}
			jobs = append(jobs, j)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("pick jobs: %w", err)
		}
		for i := range jobs {
			tok, err := claimToken(owner)
			if err != nil {
				return err
			}
			jobs[i].Token = tok
			jobs[i].Attempts++
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET locked_by = $2, locked_until_us = $3, claim_token = $4,
				attempts = attempts + 1 WHERE id = $1`, jobs[i].ID, owner, now+lease.Microseconds(), tok); err != nil {
				return fmt.Errorf("lease job: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim jobs: %w", err)
	}
	return jobs, nil
}

func claimToken(owner string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("job claim token: %w", err)
	}
	return owner + ":" + hex.EncodeToString(b[:]), nil
}

// FinishJob removes a done job unless it was enqueued again meanwhile.
func (s *Store) FinishJob(ctx context.Context, j store.Job) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE id = $1 AND claim_token = $2`, j.ID, j.Token); err != nil {
			return fmt.Errorf("finish job: %w", err)
		}
		return nil
	})
}

// RetryJob makes a failed job due again after a delay.
func (s *Store) RetryJob(ctx context.Context, j store.Job, after time.Duration, cause string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET run_after_us = $3, locked_by = NULL, locked_until_us = NULL,
			claim_token = NULL, last_error = $4 WHERE id = $1 AND claim_token = $2`,
			j.ID, j.Token, s.now()+after.Microseconds(), cause); err != nil {
			return fmt.Errorf("retry job: %w", err)
		}
		return nil
	})
}

// ClaimJob leases one named job unless another claim holds it.
func (s *Store) ClaimJob(ctx context.Context, owner, kind, subjectID string, lease time.Duration) (store.Job, error) {
	var j store.Job
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.now()
		var lockedUntil sql.NullInt64
		j = store.Job{Kind: kind, SubjectID: subjectID}
		err := tx.QueryRowContext(ctx, `SELECT r.id, r.attempts, r.locked_until_us FROM jobs r
			WHERE r.kind = $1 AND r.subject_id = $2`+s.d.LockRows,
			kind, subjectID).Scan(&j.ID, &j.Attempts, &lockedUntil)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("find job: %w", err)
		}
		if lockedUntil.Valid && lockedUntil.Int64 > now {
			return store.ErrJobHeld
		}
		tok, err := claimToken(owner)
		if err != nil {
			return err
		}
		j.Token = tok
		j.Attempts++
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET locked_by = $2, locked_until_us = $3, claim_token = $4,
			attempts = attempts + 1 WHERE id = $1`, j.ID, owner, now+lease.Microseconds(), tok); err != nil {
			return fmt.Errorf("lease job: %w", err)
		}
		return nil
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("claim %s job: %w", kind, err)
	}
	return j, nil
}

// RenewJob moves a held job's lease forward.
func (s *Store) RenewJob(ctx context.Context, j store.Job, lease time.Duration) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET locked_until_us = $3 WHERE id = $1 AND claim_token = $2`,
			j.ID, j.Token, s.now()+lease.Microseconds())
		if err != nil {
			return fmt.Errorf("renew job: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("renew job: %w", err)
		} else if n == 0 {
			return fmt.Errorf("renew %s job: %w", j.Kind, store.ErrLeaseLost)
		}
		return nil
	})
}
