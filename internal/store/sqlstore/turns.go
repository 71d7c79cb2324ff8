package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gyrehq/gyre/internal/store"
)

// turnColumns are the columns scanTurn reads, in its order.
const turnColumns = `tenant_id, agent_id, turn_id, conversation_id, task_id, body, body_sha256, occurred_at, received_us`

// insertTurnsSQL is the statement inserting n turns in one go, which
// returns the ids of the rows it inserted; rows whose identity exists are
// skipped (and compared by the caller). The texts are built once per size
// and engine, so batches of one size reuse one prepared statement (pgx and
// the SQLite statement cache keep it per connection).
//
// It is the one statement in this package not written with $N
// placeholders on SQLite: modernc.org/sqlite resolves each $N by a linear
// search of the statement's parameter names, when preparing and again on
// every bind, which makes binding a 64-row INSERT quadratic in its ~400
// parameters. Anonymous "?" placeholders bind by position; each row then
// repeats the tenant, agent and receipt time instead of sharing $1–$3.
func insertTurnsSQL(engine string, n int) string {
	if engine == "sqlite" {
		return insertTurnsQuestion[n]
	}
	return insertTurnsDollar[n]
}

// insertTurnsArgs returns the arguments of insertTurnsSQL(engine, len(turns)).
func insertTurnsArgs(engine, tenantID, agentID string, now int64, turns []store.NewTurn) []any {
	positional := engine == "sqlite"
	if positional {
		args := make([]any, 0, len(turns)*9)
		for _, t := range turns {
			args = append(args, tenantID, agentID, t.TurnID, nullable(t.ConversationID), nullable(t.TaskID),
				string(t.Body), t.SHA256, nullable(t.OccurredAt), now)
		}
		return args
	}
	args := make([]any, 0, 3+len(turns)*6)
	args = append(args, tenantID, agentID, now)
	for _, t := range turns {
		args = append(args, t.TurnID, nullable(t.ConversationID), nullable(t.TaskID),
			string(t.Body), t.SHA256, nullable(t.OccurredAt))
	}
	return args
}

var insertTurnsDollar, insertTurnsQuestion = buildInsertTurnsSQL()

func buildInsertTurnsSQL() (dollar, question []string) {
	const head = `INSERT INTO turns (tenant_id, agent_id, turn_id, conversation_id, task_id, body, body_sha256, occurred_at, received_us) VALUES `
	const tail = ` ON CONFLICT (tenant_id, agent_id, turn_id) DO NOTHING RETURNING turn_id`
	dollar = make([]string, store.MaxTurnsPerBatch+1)
	question = make([]string, store.MaxTurnsPerBatch+1)
	for n := 1; n <= store.MaxTurnsPerBatch; n++ {
		var d, q strings.Builder
		d.WriteString(head)
		q.WriteString(head)
		for i := range n {
			if i > 0 {
				d.WriteByte(',')
				q.WriteByte(',')
			}
			p := 4 + i*6
			fmt.Fprintf(&d, "($1,$2,$%d,$%d,$%d,$%d,$%d,$%d,$3)", p, p+1, p+2, p+3, p+4, p+5)
			q.WriteString("(?,?,?,?,?,?,?,?,?)")
		}
		d.WriteString(tail)
		q.WriteString(tail)
		dollar[n], question[n] = d.String(), q.String()
	}
	return dollar, question
}

// InsertTurns stores one batch of agentID's turns atomically; see
// store.TurnStore. It is one write (Store.write: a transaction, or on
// SQLite a savepoint of a group commit) of two statements when no turn was
// seen before: the agent's first-seen row and one multi-row INSERT … ON
// CONFLICT DO NOTHING RETURNING. Only turns whose identity already exists
// cost a further SELECT of their stored hashes. A conflict returns an
// error from the write, which rolls back everything the batch inserted.
func (s *Store) InsertTurns(ctx context.Context, tenantID, agentID string, turns []store.NewTurn) (store.TurnsResult, error) {
	if err := checkNewTurns(agentID, turns); err != nil {
		return store.TurnsResult{}, fmt.Errorf("insert turns: %w", err)
	}
	p := planTurns(turns)
	var res store.TurnsResult
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.now()
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO agents (tenant_id, agent_id, first_seen_us) VALUES ($1, $2, $3)
			 ON CONFLICT (tenant_id, agent_id) DO NOTHING`,
			tenantID, agentID, now); err != nil {
			return fmt.Errorf("record agent: %w", err)
		}
		inserted, err := s.insertTurnRows(ctx, tx, tenantID, agentID, now, p.rows())
		if err != nil {
			return err
		}
		conflict := p.conflict
		if len(inserted) < len(p.unique) {
			if conflict, err = storedConflict(ctx, tx, tenantID, agentID, p, inserted); err != nil {
				return err
			}
		}
		if conflict >= 0 {
			return &store.TurnConflictError{Index: conflict, TurnID: turns[conflict].TurnID}
		}
		res = store.TurnsResult{Accepted: len(inserted), Duplicates: len(turns) - len(inserted)}
		return nil
	})
	if err != nil {
		if !errors.Is(err, store.ErrConflict) && ctx.Err() == nil {
			// An unknown tenant fails the agents row's foreign key; say so.
			if _, terr := tenantByID(ctx, s.reader, tenantID); errors.Is(terr, sql.ErrNoRows) {
				err = store.ErrNotFound
			}
		}
		return store.TurnsResult{}, fmt.Errorf("insert turns: %w", err)
	}
	return res, nil
}

// checkNewTurns refuses what the API never sends: the contract has been
// checked before, so these are programming errors, not client errors.
func checkNewTurns(agentID string, turns []store.NewTurn) error {
	if agentID == "" {
		return errors.New("empty agent id")
	}
	if len(turns) == 0 || len(turns) > store.MaxTurnsPerBatch {
		return fmt.Errorf("a batch holds 1 to %d turns, not %d", store.MaxTurnsPerBatch, len(turns))
	}
	for i, t := range turns {
		switch {
		case t.TurnID == "":
			return fmt.Errorf("turn %d: empty turn id", i)
		case len(t.Body) == 0:
			return fmt.Errorf("turn %d: empty body", i)
		case !isHexSHA256(t.SHA256):
			return fmt.Errorf("turn %d: body hash is not a lowercase hex SHA-256", i)
		}
	}
	return nil
}

func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// turnPlan is a batch with its repeats resolved: the first occurrence of
// each turn id, and the first later occurrence whose body differs from it.
type turnPlan struct {
	// unique holds the index in the batch of each id's first occurrence,
	// in batch order, which is the order the rows are inserted and listed
	// in. (Two PostgreSQL transactions inserting the same new ids in
	// opposite orders can deadlock; Store.write reruns the loser, which then
	// finds the winner's rows.)
	unique []int
	turns  []store.NewTurn
	// conflict is the index of the first repeat that differs from its
	// first occurrence, or -1.
	conflict int
}

func planTurns(turns []store.NewTurn) turnPlan {
	p := turnPlan{turns: turns, conflict: -1, unique: make([]int, 0, len(turns))}
	first := make(map[string]int, len(turns))
	for i, t := range turns {
		j, seen := first[t.TurnID]
		if !seen {
			first[t.TurnID] = i
			p.unique = append(p.unique, i)
			continue
		}
		if p.conflict < 0 && turns[j].SHA256 != t.SHA256 {
			p.conflict = i
		}
	}
	return p
}

// insertTurnRows inserts the plan's first occurrences and returns the
// set of turn ids it inserted (the others exist already).
func (s *Store) insertTurnRows(ctx context.Context, tx *sql.Tx, tenantID, agentID string, now int64, turns []store.NewTurn) (map[string]bool, error) {
	args := insertTurnsArgs(s.d.Engine, tenantID, agentID, now, turns)
	rows, err := tx.QueryContext(ctx, insertTurnsSQL(s.d.Engine, len(turns)), args...)
	if err != nil {
		return nil, fmt.Errorf("insert turn rows: %w", err)
	}
	defer rows.Close()
	inserted := make(map[string]bool, len(turns))
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("insert turn rows: %w", err)
		}
		inserted[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert turn rows: %w", err)
	}
	return inserted, nil
}

// rows returns the plan's first occurrences in batch order.
func (p turnPlan) rows() []store.NewTurn {
	out := make([]store.NewTurn, len(p.unique))
	for k, i := range p.unique {
		out[k] = p.turns[i]
	}
	return out
}

// storedConflict compares each first occurrence that was not inserted with
// the hash stored under its identity and returns the batch index of the
// first conflicting turn, counting the plan's in-batch conflict, or -1.
func storedConflict(ctx context.Context, tx *sql.Tx, tenantID, agentID string, p turnPlan, inserted map[string]bool) (int, error) {
	var ids []string
	for _, i := range p.unique {
		if id := p.turns[i].TurnID; !inserted[id] {
			ids = append(ids, id)
		}
	}
	stored := make(map[string]string, len(ids))
	err := queryByTurnIDs(ctx, tx, `SELECT turn_id, body_sha256 FROM turns`, tenantID, agentID, ids, func(rows *sql.Rows) error {
		var id, sum string
		if err := rows.Scan(&id, &sum); err != nil {
			return err
		}
		stored[id] = sum
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("read stored turns: %w", err)
	}
	conflict := p.conflict
	for _, i := range p.unique {
		t := p.turns[i]
		if inserted[t.TurnID] {
			continue
		}
		sum, ok := stored[t.TurnID]
		if !ok {
			// Neither inserted nor there: only a concurrent delete does this.
			return -1, fmt.Errorf("turn %q was neither inserted nor found", t.TurnID)
		}
		if sum != t.SHA256 && (conflict < 0 || i < conflict) {
			conflict = i
		}
	}
	return conflict, nil
}

// maxIDsPerQuery bounds the IN list of one queryByTurnIDs statement.
const maxIDsPerQuery = 256

// queryByTurnIDs runs selectFrom (a "SELECT … FROM turns") for agentID's
// turns with the given ids, in chunks, calling scan for each row.
func queryByTurnIDs(ctx context.Context, q querier, selectFrom, tenantID, agentID string, ids []string, scan func(*sql.Rows) error) error {
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), maxIDsPerQuery)]
		ids = ids[len(chunk):]
		var b strings.Builder
		b.WriteString(selectFrom)
		b.WriteString(` WHERE tenant_id = $1 AND agent_id = $2 AND turn_id IN (`)
		args := make([]any, 0, 2+len(chunk))
		args = append(args, tenantID, agentID)
		for i, id := range chunk {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("$" + strconv.Itoa(3+i))
			args = append(args, id)
		}
		b.WriteByte(')')
		if err := func() error {
			rows, err := q.QueryContext(ctx, b.String(), args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				if err := scan(rows); err != nil {
					return err
				}
			}
			return rows.Err()
		}(); err != nil {
			return err
		}
	}
	return nil
}

// TurnsByID returns agentID's stored turns with the given ids, in the
// order of their first occurrence in turnIDs; unknown ids are left out.
func (s *Store) TurnsByID(ctx context.Context, tenantID, agentID string, turnIDs []string) ([]store.Turn, error) {
	order := make(map[string]int, len(turnIDs))
	ids := make([]string, 0, len(turnIDs))
	for _, id := range turnIDs {
		if _, dup := order[id]; !dup {
			order[id] = len(ids)
			ids = append(ids, id)
		}
	}
	found := make([]*store.Turn, len(ids))
	err := queryByTurnIDs(ctx, s.reader, `SELECT `+turnColumns+` FROM turns`, tenantID, agentID, ids, func(rows *sql.Rows) error {
		t, err := scanTurn(rows)
		if err != nil {
			return err
		}
		found[order[t.TurnID]] = &t
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("turns by id: %w", err)
	}
	out := make([]store.Turn, 0, len(ids))
	for _, t := range found {
		if t != nil {
			out = append(out, *t)
		}
	}
	return out, nil
}

// ListTurns lists the tenant's turns matching f in order of receipt
// (received_us, then seq), one page at a time; Until compares with the
// stored microseconds rounded as Since does, so "received before t"
// holds exactly for stored times. Each filter is served by an
// index in that order (migration 00002). On PostgreSQL, transactions
// commit in any order, so a turn may become visible after later-received
// ones were listed; a client polling with Since should overlap its windows.
func (s *Store) ListTurns(ctx context.Context, tenantID string, f store.TurnFilter, p store.Page) ([]store.Turn, string, error) {
	since := ""
	if !f.Since.IsZero() {
		since = strconv.FormatInt(ceilMicros(f.Since), 10)
	}
	scope := []string{f.AgentID, f.ConversationID, since}
	if !f.Until.IsZero() {
		// Only a bounded window adds to the scope, so the cursors of
		// lists without an end stay valid.
		scope = append(scope, strconv.FormatInt(ceilMicros(f.Until), 10))
	}
	cur := listCursor(tenantID, "turns", scope...)
	after, err := decodeTurnCursor(cur, p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list turns: %w", err)
	}
	n := limit(p)
	var b strings.Builder
	args := []any{tenantID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	b.WriteString(`SELECT ` + turnColumns + `, seq FROM turns WHERE tenant_id = $1`)
	if f.AgentID != "" {
		b.WriteString(` AND agent_id = ` + arg(f.AgentID))
	}
	if f.ConversationID != "" {
		b.WriteString(` AND conversation_id = ` + arg(f.ConversationID))
	}
	if !f.Since.IsZero() {
		b.WriteString(` AND received_us >= ` + arg(ceilMicros(f.Since)))
	}
	if !f.Until.IsZero() {
		b.WriteString(` AND received_us < ` + arg(ceilMicros(f.Until)))
	}
	if after != nil {
		r, q := arg(after.receivedUS), arg(after.seq)
		b.WriteString(` AND (received_us > ` + r + ` OR (received_us = ` + r + ` AND seq > ` + q + `))`)
	}
	b.WriteString(` ORDER BY received_us, seq LIMIT ` + arg(n+1))

	rows, err := s.reader.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list turns: %w", err)
	}
	defer rows.Close()
	turns := make([]store.Turn, 0, min(n+1, 64))
	var seqs []int64
	for rows.Next() {
		t, seq, err := scanTurnSeq(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list turns: %w", err)
		}
		turns = append(turns, t)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list turns: %w", err)
	}
	var next string
	if len(turns) > n {
		turns = turns[:n]
		next = cur.encode(turnCursor{receivedUS: store.Micros(turns[n-1].ReceivedAt), seq: seqs[n-1]}.position())
	}
	return turns, next, nil
}

// ceilMicros is t in stored microseconds, rounded up, so that "received at
// or after t" holds exactly for stored times.
func ceilMicros(t time.Time) int64 {
	us := store.Micros(t)
	if store.FromMicros(us).Before(t) {
		us++
	}
	return us
}

// scanTurn reads the turnColumns of one row.
func scanTurn(r scanner) (store.Turn, error) {
	t, _, err := scanTurnRow(r, false)
	return t, err
}

// scanTurnSeq reads the turnColumns of one row followed by seq.
func scanTurnSeq(r scanner) (store.Turn, int64, error) {
	return scanTurnRow(r, true)
}

func scanTurnRow(r scanner, withSeq bool) (store.Turn, int64, error) {
	var (
		t                    store.Turn
		conv, task, occurred sql.NullString
		received, seq        int64
	)
	dest := []any{&t.TenantID, &t.AgentID, &t.TurnID, &conv, &task, (*[]byte)(&t.Body), &t.SHA256, &occurred, &received}
	if withSeq {
		dest = append(dest, &seq)
	}
	if err := r.Scan(dest...); err != nil {
		return store.Turn{}, 0, err
	}
	t.ConversationID, t.TaskID, t.OccurredAt = conv.String, task.String, occurred.String
	t.ReceivedAt = store.FromMicros(received)
	return t, seq, nil
}

// nullable stores "" as NULL: the contract's optional identifiers are
// never empty, so "" can only mean absent.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// turnCursor is the position after the last turn of a page.
type turnCursor struct {
	receivedUS int64
	seq        int64
}

// position is the cursor position "<received_us>:<seq>".
func (c turnCursor) position() string {
	return strconv.FormatInt(c.receivedUS, 10) + ":" + strconv.FormatInt(c.seq, 10)
}

// decodeTurnCursor returns the position a turns cursor carries, nil for
// the first page, or an error wrapping store.ErrInvalidCursor.
func decodeTurnCursor(cur cursorScope, cursor string) (*turnCursor, error) {
	pos, err := cur.decode(cursor)
	if err != nil || pos == "" {
		return nil, err
	}
	rs, qs, _ := strings.Cut(pos, ":")
	r, err1 := strconv.ParseInt(rs, 10, 64)
	q, err2 := strconv.ParseInt(qs, 10, 64)
	c := turnCursor{receivedUS: r, seq: q}
	if err1 != nil || err2 != nil || q < 0 || c.position() != pos {
		return nil, fmt.Errorf("cursor is not a turn cursor: %w", store.ErrInvalidCursor)
	}
	return &c, nil
}
