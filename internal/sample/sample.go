// Package sample draws deterministic samples: the same seed and the same
// candidates give the same picks, whatever order the candidates come in.
//
// Each candidate's key is the SHA-256 of the seed (8 bytes, big-endian)
// followed by its id; a sample of n keeps the n candidates with the
// smallest keys. A candidate's fate depends only on its own key and the
// keys of the others, so a sample over a grown set keeps every earlier
// pick that is not displaced by a newcomer with a smaller key, and memory
// stays bounded by n however many candidates pass.
package sample

import (
	"bytes"
	"container/heap"
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// Sampler keeps the n candidates with the smallest keys for one seed.
type Sampler struct {
	n    int
	seed [8]byte
	kept maxHeap
	seen int
}

// New returns a sampler keeping n candidates for seed.
func New(n int, seed int64) *Sampler {
	s := &Sampler{n: n}
	binary.BigEndian.PutUint64(s.seed[:], uint64(seed))
	return s
}

// Offer considers the candidate id; pos is the caller's position for it
// (such as its order of receipt), which Picked returns. Ids must be
// distinct.
func (s *Sampler) Offer(id string, pos int) {
	s.seen++
	if s.n <= 0 {
		return
	}
	h := sha256.New()
	h.Write(s.seed[:])
	h.Write([]byte(id))
	c := candidate{pos: pos, id: id}
	h.Sum(c.key[:0])
	if len(s.kept) < s.n {
		heap.Push(&s.kept, c)
		return
	}
	if bytes.Compare(c.key[:], s.kept[0].key[:]) < 0 {
		s.kept[0] = c
		heap.Fix(&s.kept, 0)
	}
}

// Seen is how many candidates were offered.
func (s *Sampler) Seen() int { return s.seen }

// Picked returns the picked candidates' positions, ascending.
func (s *Sampler) Picked() []int {
	out := make([]int, len(s.kept))
	for i, c := range s.kept {
		out[i] = c.pos
	}
	slices.Sort(out)
	return out
}

type candidate struct {
	key [sha256.Size]byte
	pos int
	id  string
}

// maxHeap holds the kept candidates with the largest key on top.
type maxHeap []candidate

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return bytes.Compare(h[i].key[:], h[j].key[:]) > 0 }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap) Push(x any)        { *h = append(*h, x.(candidate)) }
func (h *maxHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
