package sqlitestore

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"

	"modernc.org/sqlite"
)

// stmtCacheSize bounds the prepared statements kept per connection. gyre's
// hot queries are few; queries built with a variable number of
// placeholders take the rest and fall out first.
const stmtCacheSize = 256

// cachingConnector opens SQLite connections that keep their prepared
// statements. database/sql prepares a statement for every ExecContext and
// QueryContext a driver does not cache, and SQLite's parser then costs
// more than executing a small statement; caching per connection makes a
// repeated query a bind and a step. On the single writer connection this
// is what bounds claim and intake throughput.
type cachingConnector struct {
	driver.Connector
}

func newCachingConnector(dsn string) (driver.Connector, error) {
	base, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return cachingConnector{base}, nil
}

// Connect opens a connection wrapped with a statement cache.
func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &cachingConn{Conn: conn, entries: map[string]*list.Element{}, lru: list.New()}, nil
}

// cachedStmt is one prepared statement; busy while rows read from it are
// open, when the same query on the same connection gets a fresh statement.
type cachedStmt struct {
	query string
	stmt  driver.Stmt
	busy  bool
}

// cachingConn is a driver connection with a statement cache. It forwards
// every optional interface the SQLite driver's connections implement, as
// the driver asks of wrappers (see sqlite.NewConnector).
type cachingConn struct {
	driver.Conn
	mu      sync.Mutex // database/sql serialises a connection; this guards Close racing rows
	entries map[string]*list.Element
	lru     *list.List
}

var (
	_ driver.ConnBeginTx        = (*cachingConn)(nil)
	_ driver.ConnPrepareContext = (*cachingConn)(nil)
	_ driver.ExecerContext      = (*cachingConn)(nil)
	_ driver.QueryerContext     = (*cachingConn)(nil)
	_ driver.Pinger             = (*cachingConn)(nil)
	_ driver.SessionResetter    = (*cachingConn)(nil)
	_ driver.Validator          = (*cachingConn)(nil)
)

// Unwrap returns the driver's own connection.
func (c *cachingConn) Unwrap() driver.Conn { return c.Conn }

// cacheable reports whether a query may be kept: one statement only (a
// query string with several runs them all on each execution, outside the
// driver's single-statement fast path).
func cacheable(query string) bool {
	q := strings.TrimSpace(query)
	return !strings.Contains(strings.TrimSuffix(q, ";"), ";")
}

// take returns the cached statement for query, preparing it when needed,
// or nil when the query is not cacheable or its statement is busy.
func (c *cachingConn) take(ctx context.Context, query string) (*cachedStmt, error) {
	if !cacheable(query) {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[query]; ok {
		cs := el.Value.(*cachedStmt)
		if cs.busy {
			return nil, nil
		}
		c.lru.MoveToFront(el)
		return cs, nil
	}
	st, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	cs := &cachedStmt{query: query, stmt: st}
	c.entries[query] = c.lru.PushFront(cs)
	for c.lru.Len() > stmtCacheSize {
		old := c.lru.Back()
		ocs := old.Value.(*cachedStmt)
		if ocs.busy {
			break // closed when its rows close; the cache shrinks later
		}
		c.lru.Remove(old)
		delete(c.entries, ocs.query)
		_ = ocs.stmt.Close()
	}
	return cs, nil
}

// ExecContext runs query with a cached statement.
func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cs, err := c.take(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	}
	return cs.stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

// QueryContext runs query with a cached statement, which stays busy until
// its rows are closed.
func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cs, err := c.take(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	}
	c.mu.Lock()
	cs.busy = true
	c.mu.Unlock()
	rows, err := cs.stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		c.release(cs)
		return nil, err
	}
	return &cachedRows{Rows: rows, release: func() { c.release(cs) }}, nil
}

func (c *cachingConn) release(cs *cachedStmt) {
	c.mu.Lock()
	cs.busy = false
	c.mu.Unlock()
}

// Close closes every cached statement, then the connection.
func (c *cachingConn) Close() error {
	c.mu.Lock()
	var errs []error
	for el := c.lru.Front(); el != nil; el = el.Next() {
		errs = append(errs, el.Value.(*cachedStmt).stmt.Close())
	}
	c.lru.Init()
	clear(c.entries)
	c.mu.Unlock()
	errs = append(errs, c.Conn.Close())
	return errors.Join(errs...)
}

// BeginTx forwards to the driver.
func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

// PrepareContext forwards to the driver: an explicitly prepared statement
// is the caller's to close.
func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

// Ping forwards to the driver.
func (c *cachingConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

// ResetSession forwards to the driver.
func (c *cachingConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

// IsValid forwards to the driver.
func (c *cachingConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

// cachedRows releases its statement back to the cache when closed.
type cachedRows struct {
	driver.Rows
	once    sync.Once
	release func()
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.once.Do(r.release)
	return err
}

// ColumnTypeDatabaseTypeName forwards column type names, which
// database/sql's ColumnTypes reads.
func (r *cachedRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}
