package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/flywheel"
	"github.com/gyrehq/gyre/internal/store"
)

// MaxKeyNameLen is the longest key name accepted, in characters.
const MaxKeyNameLen = 255

// MaxAgentIDs is the longest allow-list a key may carry.
const MaxAgentIDs = 1000

// KeyRequest is what a caller asks for when creating a key, from the API
// body of POST /api/v1/keys or the flags of gyre keys create.
type KeyRequest struct {
	Role gyre.Role
	// AgentIDs limits an agent or inference key to these agents; nil means
	// every agent of the tenant. An empty non-nil list is refused.
	AgentIDs []string
	Name     string
}

// Validate checks r and answers a *gyre.Error with code invalid_body whose
// Pointer names the field at fault (/role, /agent_ids/<i>, /name).
func (r KeyRequest) Validate() error {
	if r.Role == "" {
		return gyre.Errorf(gyre.CodeInvalidBody, "role is required: one of %s", roleNames()).AtPointer("/role")
	}
	if !r.Role.Valid() {
		return gyre.Errorf(gyre.CodeInvalidBody, "unknown role %q: want one of %s", r.Role, roleNames()).AtPointer("/role")
	}
	if r.AgentIDs != nil {
		if r.Role != gyre.RoleAgent && r.Role != gyre.RoleInference {
			return gyre.Errorf(gyre.CodeInvalidBody, "agent_ids applies only to agent and inference keys, not to role %s", r.Role).AtPointer("/agent_ids")
		}
		if len(r.AgentIDs) == 0 {
			return gyre.Errorf(gyre.CodeInvalidBody, "agent_ids must not be empty: omit it for a key that may act for every agent").AtPointer("/agent_ids")
		}
		if len(r.AgentIDs) > MaxAgentIDs {
			return gyre.Errorf(gyre.CodeInvalidBody, "agent_ids has %d entries; at most %d are allowed", len(r.AgentIDs), MaxAgentIDs).AtPointer("/agent_ids")
		}
		for i, id := range r.AgentIDs {
			if err := ValidateAgentID(id); err != nil {
				return gyre.Errorf(gyre.CodeInvalidBody, "agent_ids[%d] is %v", i, err).AtPointer(fmt.Sprintf("/agent_ids/%d", i))
			}
		}
	}
	if n := utf8.RuneCountInString(r.Name); n > MaxKeyNameLen {
		return gyre.Errorf(gyre.CodeInvalidBody, "name has %d characters; at most %d are allowed", n, MaxKeyNameLen).AtPointer("/name")
	}
	if strings.ContainsFunc(r.Name, isControl) {
		return gyre.Errorf(gyre.CodeInvalidBody, "name must not contain control characters").AtPointer("/name")
	}
	return nil
}

func roleNames() string {
	names := make([]string, len(gyre.Roles))
	for i, r := range gyre.Roles {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// KeyCreator stores new keys. store.Store satisfies it.
type KeyCreator interface {
	CreateKey(ctx context.Context, k store.NewKey) (gyre.APIKey, error)
}

// CreateKey validates req, mints a key and stores its hash in tenantID. It
// returns the stored key and the secret, which the caller shows once and
// never logs. Duplicate agent ids are dropped, keeping the first.
func CreateKey(ctx context.Context, s KeyCreator, tenantID string, req KeyRequest) (gyre.APIKey, string, error) {
	if err := req.Validate(); err != nil {
		return gyre.APIKey{}, "", err
	}
	secret, hash, err := NewKey()
	if err != nil {
		return gyre.APIKey{}, "", fmt.Errorf("mint key: %w", err)
	}
	var agents []string
	if req.AgentIDs != nil {
		agents = make([]string, 0, len(req.AgentIDs))
		for _, id := range req.AgentIDs {
			if !slices.Contains(agents, id) {
				agents = append(agents, id)
			}
		}
	}
	k, err := s.CreateKey(ctx, store.NewKey{
		TenantID: tenantID,
		Name:     req.Name,
		Role:     req.Role,
		AgentIDs: agents,
		Hash:     hash,
	})
	if err != nil {
		return gyre.APIKey{}, "", fmt.Errorf("create key: %w", err)
	}
	return k, secret, nil
}

// ValidateAgentID checks id against the flywheel/1 agent_id grammar, as
// the contract's own validator (package flywheel) applies it: 1 to 255
// characters forming one path segment, with no slash or backslash, not "."
// or "..", no control characters, and no leading or trailing whitespace.
// It also refuses invalid UTF-8, which a JSON body cannot carry but a
// command line can.
func ValidateAgentID(id string) error {
	if !utf8.ValidString(id) {
		return errors.New("not valid UTF-8")
	}
	if err := flywheel.ValidateAgentID(id); err != nil {
		var ve *flywheel.ValidationError
		if !errors.As(err, &ve) {
			return fmt.Errorf("check agent_id: %w", err)
		}
		return errors.New("not a valid agent_id: want 1 to 255 characters with no slash, backslash or control character, no leading or trailing whitespace, and not . or ..")
	}
	return nil
}

// isControl matches the contract's excluded ranges U+0000–U+001F and
// U+007F–U+009F.
func isControl(r rune) bool { return r <= 0x1f || (r >= 0x7f && r <= 0x9f) }
