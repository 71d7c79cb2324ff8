package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// maxGroup bounds how many write transactions share one commit.
const maxGroup = 64

// groupWriter is group commit for an engine with one writer connection
// (SQLite). Each write transaction would otherwise wait for the previous
// one's commit, whose WAL sync dominates a small transaction. The group
// writer takes every write queued while the previous group committed, runs
// each as a savepoint of one transaction — in queue order, on the one
// connection, exactly as serial transactions would run — and commits them
// with one sync. A write that fails rolls back to its savepoint and
// affects no other. Every caller learns its result only after the commit,
// so an acknowledged write is durable, as before.
type groupWriter struct {
	db    *sql.DB
	reqs  chan *groupReq
	stop  chan struct{}
	done  chan struct{}
	close func()
}

type groupReq struct {
	ctx  context.Context
	fn   func(*sql.Tx) error
	err  error
	done chan struct{}
}

func newGroupWriter(db *sql.DB) *groupWriter {
	g := &groupWriter{db: db, reqs: make(chan *groupReq), stop: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	g.close = func() {
		once.Do(func() { close(g.stop) })
		<-g.done
	}
	go g.loop()
	return g
}

var errStoreClosed = errors.New("store is closed")

// write queues fn and waits for its group to commit. Once fn has been
// handed to the writer, the caller waits for the outcome even if ctx ends,
// because only the commit says whether fn's writes happened.
func (g *groupWriter) write(ctx context.Context, fn func(*sql.Tx) error) error {
	r := &groupReq{ctx: ctx, fn: fn, done: make(chan struct{})}
	select {
	case g.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.stop:
		return errStoreClosed
	}
	<-r.done
	return r.err
}

func (g *groupWriter) loop() {
	defer close(g.done)
	for {
		var first *groupReq
		select {
		case first = <-g.reqs:
		case <-g.stop:
			return
		}
		batch := []*groupReq{first}
	drain:
		for len(batch) < maxGroup {
			select {
			case r := <-g.reqs:
				batch = append(batch, r)
			default:
				break drain
			}
		}
		g.run(batch)
		for _, r := range batch {
			close(r.done)
		}
	}
}

// run executes one group in one transaction.
func (g *groupWriter) run(batch []*groupReq) {
	if len(batch) == 1 {
		// Alone: a plain transaction, no savepoint needed.
		r := batch[0]
		r.err = runTx(r.ctx, g.db, r.fn)
		return
	}
	// The shared transaction outlives any one caller's context; each
	// caller's context still bounds its own statements.
	tx, err := g.db.BeginTx(context.Background(), nil)
	if err != nil {
		for _, r := range batch {
			r.err = fmt.Errorf("begin: %w", err)
		}
		return
	}
	ok := make([]bool, len(batch))
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		if _, err := tx.Exec(`SAVEPOINT gw`); err != nil {
			r.err = fmt.Errorf("savepoint: %w", err)
			continue
		}
		if err := callFn(r.fn, tx); err != nil {
			r.err = err
			if _, rerr := tx.Exec(`ROLLBACK TO gw`); rerr != nil {
				g.fail(tx, batch, fmt.Errorf("roll back a failed write: %w", rerr))
				return
			}
		}
		if _, err := tx.Exec(`RELEASE gw`); err != nil {
			g.fail(tx, batch, fmt.Errorf("release savepoint: %w", err))
			return
		}
		ok[i] = r.err == nil
	}
	if err := tx.Commit(); err != nil {
		for i, r := range batch {
			if ok[i] {
				r.err = fmt.Errorf("commit: %w", err)
			}
		}
	}
}

// fail rolls the whole group back: every write in it fails.
func (g *groupWriter) fail(tx *sql.Tx, batch []*groupReq, err error) {
	_ = tx.Rollback()
	for _, r := range batch {
		if r.err == nil {
			r.err = err
		}
	}
}

// runTx runs fn in its own transaction.
func runTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := callFn(fn, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// callFn runs fn, turning a panic into an error so that one bad write
// cannot take the shared writer down.
func callFn(fn func(*sql.Tx) error, tx *sql.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("write transaction panicked: %v", p)
		}
	}()
	return fn(tx)
}
