package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gyrehq/gyre/internal/jcs"
	"github.com/gyrehq/gyre/internal/store"
)

const taskColumns = `id, case_id, suite_name, suite_version, source_agent_id, source_turn_id,
	input, turn_input, graders, created_us`

// maxTurnTasks bounds one CreateTurnTasks call (the API allows fewer).
const maxTurnTasks = 10000

// CreateSuiteTasks creates one task per element of t.Tasks, in order, in
// one transaction; store.ErrNotFound if the suite version is not the
// tenant's.
func (s *Store) CreateSuiteTasks(ctx context.Context, t store.SuiteTasks) ([]store.Task, error) {
	if len(t.Tasks) == 0 {
		return nil, errors.New("create suite tasks: no tasks")
	}
	for i, nt := range t.Tasks {
		if err := checkNewTask(nt); err != nil {
			return nil, fmt.Errorf("create suite tasks: task %d: %w", i, err)
		}
	}
	var out []store.Task
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.insertSuiteTasks(ctx, tx, t, s.now())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create suite tasks: %w", err)
	}
	return out, nil
}

// insertSuiteTasks is CreateSuiteTasks inside tx.
func (s *Store) insertSuiteTasks(ctx context.Context, tx *sql.Tx, t store.SuiteTasks, now int64) ([]store.Task, error) {
	var one int
	err := tx.QueryRowContext(ctx,
		`SELECT 1 FROM suite_versions WHERE tenant_id = $1 AND name = $2 AND version = $3`,
		t.TenantID, t.SuiteName, t.SuiteVersion).Scan(&one)
	if err != nil {
		return nil, notFound("suite version", err)
	}
	out := make([]store.Task, 0, len(t.Tasks))
	for _, nt := range t.Tasks {
		task := store.Task{
			CaseID: nt.CaseID, SuiteName: t.SuiteName, SuiteVersion: t.SuiteVersion,
			Input: nt.Input, TurnInput: nt.TurnInput, Graders: nt.Graders, CreatedAt: store.FromMicros(now),
		}
		if err := insertTask(ctx, tx, t.TenantID, &task, now); err != nil {
			return nil, err
		}
		out = append(out, task)
	}
	return out, nil
}

// CreateTurnTasks creates one task per stored turn of t.TurnIDs, in order,
// in one transaction that reads the turns it replays. A turn that is not
// stored for (tenant, agent), or whose input_text is null, fails the call
// with a *store.TurnRefError.
func (s *Store) CreateTurnTasks(ctx context.Context, t store.TurnTasks) ([]store.Task, error) {
	if err := checkTurnTasks(t); err != nil {
		return nil, fmt.Errorf("create turn tasks: %w", err)
	}
	var out []store.Task
	err := s.write(ctx, func(tx *sql.Tx) error {
		var tasked map[string]bool
		if t.SkipExisting {
			// Two calls skipping existing tasks of one agent must not both
			// see a turn without its task: they take turns.
			if err := s.lockTx(ctx, tx, "turn-tasks/"+t.TenantID+"/"+t.AgentID); err != nil {
				return err
			}
			var err error
			if tasked, err = turnsWithTasks(ctx, tx, t); err != nil {
				return err
			}
		}
		bodies, err := turnBodies(ctx, tx, t)
		if err != nil {
			return err
		}
		inputs := make([]string, len(t.TurnIDs))
		for i, id := range t.TurnIDs {
			body, ok := bodies[id]
			if !ok {
				return &store.TurnRefError{Index: i, TurnID: id, Err: store.ErrNotFound}
			}
			if tasked[id] {
				continue
			}
			var turn struct {
				InputText *string `json:"input_text"`
			}
			if err := json.Unmarshal([]byte(body), &turn); err != nil {
				return fmt.Errorf("turn %q: decode stored body: %w", id, err)
			}
			if turn.InputText == nil {
				return &store.TurnRefError{Index: i, TurnID: id, Err: store.ErrNoInputText}
			}
			inputs[i] = *turn.InputText
		}
		out = make([]store.Task, 0, len(t.TurnIDs))
		now := s.now()
		for i, id := range t.TurnIDs {
			if tasked[id] {
				continue
			}
			// The task's input is what a suite case replaying this turn
			// would hold, so its turn_input follows the same rule.
			input, err := jcs.Marshal(map[string]string{"question": inputs[i]})
			if err != nil {
				return fmt.Errorf("turn %q: encode input: %w", id, err)
			}
			task := store.Task{
				CaseID: id, SourceAgentID: t.AgentID, SourceTurnID: id,
				Input: input, TurnInput: inputs[i], Graders: t.Graders, CreatedAt: store.FromMicros(now),
			}
			if err := insertTask(ctx, tx, t.TenantID, &task, now); err != nil {
				return err
			}
			out = append(out, task)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create turn tasks: %w", err)
	}
	return out, nil
}

// turnsWithTasks returns which of t's turns already have a task.
func turnsWithTasks(ctx context.Context, tx *sql.Tx, t store.TurnTasks) (map[string]bool, error) {
	out := make(map[string]bool)
	const batch = 500
	for start := 0; start < len(t.TurnIDs); start += batch {
		part := t.TurnIDs[start:min(start+batch, len(t.TurnIDs))]
		args := make([]any, 0, len(part)+2)
		args = append(args, t.TenantID, t.AgentID)
		for _, id := range part {
			args = append(args, id)
		}
		rows, err := tx.QueryContext(ctx,
			`SELECT DISTINCT source_turn_id FROM tasks
			 WHERE tenant_id = $1 AND source_agent_id = $2 AND source_turn_id IN (`+placeholders(3, len(part))+`)`,
			args...)
		if err != nil {
			return nil, fmt.Errorf("read existing tasks: %w", err)
		}
		err = func() error {
			defer rows.Close()
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				out[id] = true
			}
			return rows.Err()
		}()
		if err != nil {
			return nil, fmt.Errorf("read existing tasks: %w", err)
		}
	}
	return out, nil
}

// EachTurnRef calls fn with every turn sel selects, in order of receipt,
// each with whether it has input to replay and whether a task was made
// from it already.
func (s *Store) EachTurnRef(ctx context.Context, sel store.TurnSelection, fn func(store.TurnRef) error) error {
	if sel.AgentID == "" {
		return errors.New("each turn ref: no agent id")
	}
	args := []any{sel.TenantID, sel.AgentID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var b strings.Builder
	b.WriteString(`SELECT t.turn_id, ` + fmt.Sprintf(s.d.JSONIsString, "t.body", "input_text") + `,
		CASE WHEN EXISTS (SELECT 1 FROM tasks k WHERE k.tenant_id = t.tenant_id
			AND k.source_agent_id = t.agent_id AND k.source_turn_id = t.turn_id) THEN 1 ELSE 0 END
		FROM turns t WHERE t.tenant_id = $1 AND t.agent_id = $2`)
	if sel.ConversationID != "" {
		b.WriteString(` AND t.conversation_id = ` + arg(sel.ConversationID))
	}
	if !sel.Since.IsZero() {
		b.WriteString(` AND t.received_us >= ` + arg(ceilMicros(sel.Since)))
	}
	if !sel.Until.IsZero() {
		b.WriteString(` AND t.received_us < ` + arg(ceilMicros(sel.Until)))
	}
	b.WriteString(` ORDER BY t.received_us, t.seq`)
	rows, err := s.reader.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return fmt.Errorf("each turn ref: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ref             store.TurnRef
			hasInput, tasks int
		)
		if err := rows.Scan(&ref.TurnID, &hasInput, &tasks); err != nil {
			return fmt.Errorf("each turn ref: %w", err)
		}
		ref.HasInput, ref.HasTask = hasInput == 1, tasks == 1
		if err := fn(ref); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("each turn ref: %w", err)
	}
	return nil
}

func checkTurnTasks(t store.TurnTasks) error {
	switch {
	case t.AgentID == "":
		return errors.New("no agent id")
	case len(t.TurnIDs) == 0:
		return errors.New("no turn ids")
	case len(t.TurnIDs) > maxTurnTasks:
		return fmt.Errorf("%d turn ids, at most %d", len(t.TurnIDs), maxTurnTasks)
	case !json.Valid(t.Graders):
		return errors.New("graders are not JSON")
	}
	seen := make(map[string]bool, len(t.TurnIDs))
	for _, id := range t.TurnIDs {
		if id == "" {
			return errors.New("empty turn id")
		}
		if seen[id] {
			return fmt.Errorf("turn id %q given twice", id)
		}
		seen[id] = true
	}
	return nil
}

// turnBodies reads the stored bodies of t's turns, by turn id.
func turnBodies(ctx context.Context, tx *sql.Tx, t store.TurnTasks) (map[string]string, error) {
	out := make(map[string]string, len(t.TurnIDs))
	const batch = 500
	for start := 0; start < len(t.TurnIDs); start += batch {
		part := t.TurnIDs[start:min(start+batch, len(t.TurnIDs))]
		args := make([]any, 0, len(part)+2)
		args = append(args, t.TenantID, t.AgentID)
		for _, id := range part {
			args = append(args, id)
		}
		rows, err := tx.QueryContext(ctx,
			`SELECT turn_id, body FROM turns
			 WHERE tenant_id = $1 AND agent_id = $2 AND turn_id IN (`+placeholders(3, len(part))+`)`,
			args...)
		if err != nil {
			return nil, fmt.Errorf("read turns: %w", err)
		}
		err = func() error {
			defer rows.Close()
			for rows.Next() {
				var id, body string
				if err := rows.Scan(&id, &body); err != nil {
					return err
				}
				out[id] = body
			}
			return rows.Err()
		}()
		if err != nil {
			return nil, fmt.Errorf("read turns: %w", err)
		}
	}
	return out, nil
}

func checkNewTask(nt store.NewTask) error {
	switch {
	case nt.CaseID == "":
		return errors.New("no case id")
	case !json.Valid(nt.Input):
		return errors.New("input is not JSON")
	case !json.Valid(nt.Graders):
		return errors.New("graders are not JSON")
	}
	return nil
}

// insertTask mints task's id and inserts it.
func insertTask(ctx context.Context, tx *sql.Tx, tenantID string, task *store.Task, now int64) error {
	id, err := newID()
	if err != nil {
		return err
	}
	task.ID = id
	_, err = tx.ExecContext(ctx,
		`INSERT INTO tasks (id, tenant_id, suite_name, suite_version, case_id, input, turn_input, graders,
		                    source_agent_id, source_turn_id, created_us)
		 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		id, tenantID, emptyAsNull(task.SuiteName), emptyAsNull(task.SuiteVersion), task.CaseID,
		string(task.Input), task.TurnInput, string(task.Graders),
		emptyAsNull(task.SourceAgentID), emptyAsNull(task.SourceTurnID), now)
	if err != nil {
		return fmt.Errorf("insert task: %w", err)
	}
	return nil
}

// Task returns one of the tenant's tasks; store.ErrNotFound if it is not
// the tenant's.
func (s *Store) Task(ctx context.Context, tenantID, id string) (store.Task, error) {
	t, err := scanTask(s.reader.QueryRowContext(ctx,
		`SELECT `+taskColumns+` FROM tasks WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if err != nil {
		return store.Task{}, notFound("task", err)
	}
	return t, nil
}

// ListTasks lists the tenant's tasks, oldest first (UUIDv7 order), one
// page at a time, optionally only those of one suite.
func (s *Store) ListTasks(ctx context.Context, tenantID string, f store.TaskFilter, p store.Page) ([]store.Task, string, error) {
	cur := listCursor(tenantID, "tasks", f.Suite)
	after, err := cur.decodeID(p.Cursor)
	if err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	n := limit(p)
	q := `SELECT ` + taskColumns + ` FROM tasks WHERE tenant_id = $1 AND id > $2`
	args := []any{tenantID, after, n + 1}
	if f.Suite != "" {
		q += ` AND suite_name = $4`
		args = append(args, f.Suite)
	}
	rows, err := s.reader.QueryContext(ctx, q+` ORDER BY id LIMIT $3`, args...)
	if err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	defer rows.Close()
	out := make([]store.Task, 0, min(n, 64))
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, "", fmt.Errorf("list tasks: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	var next string
	if len(out) > n {
		out = out[:n]
		next = cur.encode(out[n-1].ID)
	}
	return out, next, nil
}

func scanTask(r scanner) (store.Task, error) {
	var (
		t                                   store.Task
		suiteName, suiteVersion, agent, tid sql.NullString
		input, graders                      string
		created                             int64
	)
	if err := r.Scan(&t.ID, &t.CaseID, &suiteName, &suiteVersion, &agent, &tid,
		&input, &t.TurnInput, &graders, &created); err != nil {
		return store.Task{}, err
	}
	t.SuiteName, t.SuiteVersion = suiteName.String, suiteVersion.String
	t.SourceAgentID, t.SourceTurnID = agent.String, tid.String
	t.Input, t.Graders = json.RawMessage(input), json.RawMessage(graders)
	t.CreatedAt = store.FromMicros(created)
	return t, nil
}

// emptyAsNull stores "" as NULL.
func emptyAsNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}
