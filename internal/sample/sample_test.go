package sample

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// pick samples n of ids offered in the given order and returns the
// picked ids, sorted.
func pick(n int, seed int64, ids []string) []string {
	s := New(n, seed)
	for i, id := range ids {
		s.Offer(id, i)
	}
	var out []string
	for _, p := range s.Picked() {
		out = append(out, ids[p])
	}
	slices.Sort(out)
	return out
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("turn-%d", i)
	}
	return out
}

func TestSameSeedSamePicksInAnyOrder(t *testing.T) {
	t.Parallel()
	all := ids(200)
	want := pick(10, 7, all)
	if len(want) != 10 {
		t.Fatalf("picked %d, want 10", len(want))
	}
	shuffled := slices.Clone(all)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	if got := pick(10, 7, shuffled); !slices.Equal(got, want) {
		t.Errorf("shuffled candidates picked %v, want %v", got, want)
	}
}

func TestSeedsPickDifferently(t *testing.T) {
	t.Parallel()
	all := ids(200)
	a, b := pick(10, 1, all), pick(10, 2, all)
	if slices.Equal(a, b) {
		t.Errorf("seeds 1 and 2 picked the same 10 of 200: %v", a)
	}
}

func TestPickedPositionsAscend(t *testing.T) {
	t.Parallel()
	s := New(5, 3)
	for i, id := range ids(50) {
		s.Offer(id, i)
	}
	p := s.Picked()
	if len(p) != 5 || !slices.IsSorted(p) || s.Seen() != 50 {
		t.Errorf("Picked = %v after %d offers, want 5 ascending positions after 50", p, s.Seen())
	}
}

func TestFewerCandidatesThanSampleKeepsAll(t *testing.T) {
	t.Parallel()
	if got := pick(10, 0, ids(3)); !slices.Equal(got, ids(3)) {
		t.Errorf("picked %v, want every one of 3 candidates", got)
	}
}

func TestGrownSetKeepsUndisplacedPicks(t *testing.T) {
	t.Parallel()
	before := pick(10, 9, ids(100))
	after := pick(10, 9, ids(300))
	// Every pick of the grown set drawn from the first 100 must be one
	// of the earlier picks: a newcomer can only displace.
	for _, id := range after {
		if slices.Contains(ids(100), id) && !slices.Contains(before, id) {
			t.Errorf("grown set picked %s, which the first 100 did not", id)
		}
	}
}

func TestPicksAreRoughlyUniform(t *testing.T) {
	t.Parallel()
	// Over many seeds each of 20 candidates is picked about 5/20 of the
	// time; a biased key (say, by id order) would not be.
	all := ids(20)
	counts := map[string]int{}
	const seeds = 4000
	for seed := range int64(seeds) {
		for _, id := range pick(5, seed, all) {
			counts[id]++
		}
	}
	for _, id := range all {
		if c := counts[id]; c < 850 || c > 1150 { // expected 1000, sd ~27
			t.Errorf("%s picked %d times in %d seeds, want about 1000", id, c, seeds)
		}
	}
}
