package auth

import (
	"context"
	"sync"
	"time"

	"github.com/gyrehq/gyre"
)

// lookupTimeout bounds one shared key lookup, which runs detached from
// the requests waiting for it.
const lookupTimeout = 30 * time.Second

// freshLookups lets concurrent requests with the same key share one store
// lookup without ever seeing an answer older than themselves: a request
// joins the next lookup of its key, one that starts after the request
// arrived, never one already in flight. So a revocation committed before
// a request arrives is always seen by it, and under load a busy key costs
// one lookup per round trip instead of one per request.
type freshLookups struct {
	keys KeyFinder
	mu   sync.Mutex
	// lines holds a key hash while a lookup of it is in flight; its value
	// is the lookup that starts when that one ends, nil until someone
	// waits for it.
	lines map[[32]byte]*keyLookup
}

type keyLookup struct {
	ctx     context.Context // the first waiter's, for its values
	waiters int             // requests waiting for it (under mu)
	done    chan struct{}
	key     gyre.APIKey
	err     error
}

func newFreshLookups(keys KeyFinder) *freshLookups {
	return &freshLookups{keys: keys, lines: map[[32]byte]*keyLookup{}}
}

// find returns the key whose secret hashes to hash, as the store has it
// at some moment after find was called.
func (f *freshLookups) find(ctx context.Context, hash [32]byte) (gyre.APIKey, error) {
	f.mu.Lock()
	next, busy := f.lines[hash]
	if !busy {
		// Nothing in flight: look it up now, then start whoever queued.
		f.lines[hash] = nil
		f.mu.Unlock()
		l := &keyLookup{ctx: ctx, done: make(chan struct{})}
		f.run(hash, l)
		return l.key, l.err
	}
	if next == nil {
		next = &keyLookup{ctx: ctx, done: make(chan struct{})}
		f.lines[hash] = next
	}
	next.waiters++
	f.mu.Unlock()
	select {
	case <-next.done:
		return next.key, next.err
	case <-ctx.Done():
		return gyre.APIKey{}, ctx.Err()
	}
}

// run performs l, then hands the line to the lookup queued behind it.
func (f *freshLookups) run(hash [32]byte, l *keyLookup) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), lookupTimeout)
	l.key, l.err = f.keys.KeyByHash(ctx, hash)
	cancel()
	close(l.done)
	f.mu.Lock()
	next := f.lines[hash]
	if next == nil {
		delete(f.lines, hash)
		f.mu.Unlock()
		return
	}
	f.lines[hash] = nil
	f.mu.Unlock()
	go f.run(hash, next)
}
