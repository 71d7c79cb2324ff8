package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/gyrehq/gyre/internal/clock"
	"github.com/gyrehq/gyre/internal/store"
)

// Leases on one named job (ClaimJob, RenewJob).
func runJobLeases(t *testing.T, open Opener) {
	t.Run("ClaimJobHoldsTheNamedJobAgainstTheQueue", func(t *testing.T) {
		t.Parallel()
		testClaimJobHolds(t, open)
	})
	t.Run("RenewNamedJobKeepsTheLeaseUntilItIsLost", func(t *testing.T) {
		t.Parallel()
		testRenewNamedJob(t, open)
	})
}

// A claimed named job is not handed to the queue's consumers until its
// lease lapses; a job another holds is ErrJobHeld, a finished one
// ErrNotFound; a job waiting for a retry may be claimed by name at once.
func testClaimJobHolds(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	for _, id := range []string{"a", "b"} {
		if err := s.EnqueueJob(ctx, store.JobDatasetBuild, id); err != nil {
			t.Fatal(err)
		}
	}
	j, err := s.ClaimJob(ctx, "cli", store.JobDatasetBuild, "b", time.Minute)
	if err != nil || j.SubjectID != "b" || j.Kind != store.JobDatasetBuild || j.Attempts != 1 || j.Token == "" {
		t.Fatalf("ClaimJob = %+v, %v", j, err)
	}
	if _, err := s.ClaimJob(ctx, "other", store.JobDatasetBuild, "b", time.Minute); !errors.Is(err, store.ErrJobHeld) {
		t.Fatalf("claiming a held job: %v, want ErrJobHeld", err)
	}
	if _, err := s.ClaimJob(ctx, "cli", store.JobDatasetBuild, "nope", time.Minute); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claiming no job: %v, want ErrNotFound", err)
	}
	got, err := s.ClaimJobs(ctx, "server", []string{store.JobDatasetBuild}, 5, time.Minute)
	if err != nil || len(got) != 1 || got[0].SubjectID != "a" {
		t.Fatalf("the queue handed out %+v (%v), want only the free job a", got, err)
	}
	clk.Advance(time.Minute)
	got, err = s.ClaimJobs(ctx, "server", []string{store.JobDatasetBuild}, 5, time.Minute)
	if err != nil || len(got) != 2 || got[0].SubjectID != "a" || got[1].SubjectID != "b" {
		t.Fatalf("after the leases lapsed: %+v %v, want both jobs", got, err)
	}
	// The lapsed claim cannot finish the job the server now runs.
	if err := s.FinishJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimJob(ctx, "cli", store.JobDatasetBuild, "b", time.Minute); !errors.Is(err, store.ErrJobHeld) {
		t.Fatalf("a lapsed claim's FinishJob removed the job another holds: %v", err)
	}
	// A job waiting for its retry is claimed by name at once; a finished
	// one is gone.
	for _, g := range got {
		if g.SubjectID == "a" {
			if err := s.RetryJob(ctx, g, time.Hour, "boom"); err != nil {
				t.Fatal(err)
			}
		}
	}
	ra, err := s.ClaimJob(ctx, "cli", store.JobDatasetBuild, "a", time.Minute)
	if err != nil || ra.Attempts != 3 {
		t.Fatalf("claiming a job waiting for its retry: %+v %v", ra, err)
	}
	if err := s.FinishJob(ctx, ra); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimJob(ctx, "cli", store.JobDatasetBuild, "a", time.Minute); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claiming a finished job: %v, want ErrNotFound", err)
	}
}

// RenewJob moves the lease from now, so a claim that keeps extending is
// never taken over; once the lease lapsed and another claimed the job, or
// the job was enqueued again, the old claim's RenewJob is ErrLeaseLost.
func testRenewNamedJob(t *testing.T, open Opener) {
	clk := clock.NewFake(Start)
	s := open(t, clk)
	ctx := t.Context()
	if err := s.EnqueueJob(ctx, store.JobDatasetBuild, "d"); err != nil {
		t.Fatal(err)
	}
	j, err := s.ClaimJob(ctx, "cli", store.JobDatasetBuild, "d", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.Advance(40 * time.Second)
		if err := s.RenewJob(ctx, j, time.Minute); err != nil {
			t.Fatalf("RenewJob: %v", err)
		}
		if got, _ := s.ClaimJobs(ctx, "server", []string{store.JobDatasetBuild}, 1, time.Minute); len(got) != 0 {
			t.Fatalf("the queue took a job whose lease was extended: %+v", got)
		}
	}
	clk.Advance(61 * time.Second)
	taken, err := s.ClaimJobs(ctx, "server", []string{store.JobDatasetBuild}, 1, time.Minute)
	if err != nil || len(taken) != 1 {
		t.Fatalf("a lapsed lease was not taken over: %+v %v", taken, err)
	}
	if err := s.RenewJob(ctx, j, time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("extending a lease another took: %v, want ErrLeaseLost", err)
	}
	if err := s.RenewJob(ctx, taken[0], time.Minute); err != nil {
		t.Fatalf("the new holder's RenewJob: %v", err)
	}
	if err := s.EnqueueJob(ctx, store.JobDatasetBuild, "d"); err != nil {
		t.Fatal(err)
	}
	if err := s.RenewJob(ctx, taken[0], time.Minute); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("extending a job enqueued again: %v, want ErrLeaseLost", err)
	}
}
