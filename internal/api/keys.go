package api

import (
	"errors"
	"net/http"
	"time"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/auth"
	"github.com/gyrehq/gyre/internal/store"
)

// keyJSON is a key as the API shows it: never its secret or hash.
type keyJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Role      gyre.Role  `json:"role"`
	AgentIDs  []string   `json:"agent_ids"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

func toKeyJSON(k gyre.APIKey) keyJSON {
	return keyJSON{ID: k.ID, Name: k.Name, Role: k.Role, AgentIDs: k.AgentIDs, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

// createdKeyJSON is the answer of POST /keys, the only place the secret
// is ever shown.
type createdKeyJSON struct {
	ID        string    `json:"id"`
	Key       string    `json:"key"`
	Role      gyre.Role `json:"role"`
	AgentIDs  []string  `json:"agent_ids"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// principal returns the request's authenticated Principal.
func principal(r *http.Request) (auth.Principal, error) {
	p, ok := auth.FromContext(r.Context())
	if !ok {
		return p, errors.New("route has no principal: registered without a role")
	}
	return p, nil
}

// createKey is POST /api/v1/keys.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	var body struct {
		Role     gyre.Role `json:"role"`
		AgentIDs []string  `json:"agent_ids"`
		Name     string    `json:"name"`
	}
	if err := s.decodeJSON(r, &body); err != nil {
		return err
	}
	k, secret, err := auth.CreateKey(r.Context(), s.store, p.TenantID, auth.KeyRequest{
		Role: body.Role, AgentIDs: body.AgentIDs, Name: body.Name,
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, createdKeyJSON{
		ID: k.ID, Key: secret, Role: k.Role, AgentIDs: k.AgentIDs, Name: k.Name, CreatedAt: k.CreatedAt,
	})
	return nil
}

// listKeys is GET /api/v1/keys: the tenant's keys, revoked ones too,
// oldest first, without secrets.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	pg, err := pageOnly(r)
	if err != nil {
		return err
	}
	keys, next, err := s.store.ListKeys(r.Context(), p.TenantID, pg)
	if err != nil {
		return err
	}
	items := make([]keyJSON, len(keys))
	for i, k := range keys {
		items[i] = toKeyJSON(k)
	}
	writeJSON(w, http.StatusOK, newList(items, next))
	return nil
}

// revokeKey is DELETE /api/v1/keys/{id}. A key of another tenant is 404,
// like one that does not exist; revoking a revoked key is 204 again.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	p, err := principal(r)
	if err != nil {
		return err
	}
	id, err := pathUUID(r, "id")
	if err != nil {
		return err
	}
	if err := s.store.RevokeKey(r.Context(), p.TenantID, id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return gyre.Errorf(gyre.CodeNotFound, "no key %s in this tenant", id)
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
