package auth

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gyrehq/gyre"
	"github.com/gyrehq/gyre/internal/store"
)

func TestValidateAgentID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id string
		ok bool
	}{
		{"support-bot", true},
		{"a", true},
		{"Agent 7", true},
		{"ünïcode-✓", true},
		{strings.Repeat("x", 255), true},
		{strings.Repeat("é", 255), true},
		{"a.b", true},
		{"...", true},
		{"", false},
		{strings.Repeat("x", 256), false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{`a\b`, false},
		{"a\x00b", false},
		{"a\nb", false},
		{"a\x7fb", false},
		{"a\u0085b", false},
		{" a", false},
		{"a ", false},
		{"\u00a0a", false},
		{"a\u3000", false},
		{"\ufeffa", false},
		{"a\u2028", false},
		{"a\u200a", false},
		{"a\u200bb", true}, // zero width space is not \s
		{"a\u2028b ", false},
		{"😀", true},
		{strings.Repeat("😀", 255), true},
		{strings.Repeat("😀", 256), false},
		{"a\xffb", false},
	}
	for _, tt := range tests {
		err := ValidateAgentID(tt.id)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateAgentID(%q) = %v, want ok %v", tt.id, err, tt.ok)
		}
	}
}

func FuzzValidateAgentID(f *testing.F) {
	for _, s := range []string{"bot", ".", " a", "a\u2028b ", "x/y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidateAgentID(id) == nil {
			if id == "." || id == ".." || strings.ContainsAny(id, `/\`) || id == "" {
				t.Fatalf("ValidateAgentID(%q) accepted a forbidden id", id)
			}
		}
	})
}

func TestKeyRequestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		req     KeyRequest
		pointer string // "" when valid
	}{
		{"admin", KeyRequest{Role: gyre.RoleAdmin}, ""},
		{"agent with allow-list", KeyRequest{Role: gyre.RoleAgent, AgentIDs: []string{"a", "b"}}, ""},
		{"inference with allow-list", KeyRequest{Role: gyre.RoleInference, AgentIDs: []string{"a"}}, ""},
		{"named", KeyRequest{Role: gyre.RoleReader, Name: "dashboards"}, ""},
		{"no role", KeyRequest{}, "/role"},
		{"bad role", KeyRequest{Role: "root"}, "/role"},
		{"role in caps", KeyRequest{Role: "Admin"}, "/role"},
		{"empty allow-list", KeyRequest{Role: gyre.RoleAgent, AgentIDs: []string{}}, "/agent_ids"},
		{"allow-list on reader", KeyRequest{Role: gyre.RoleReader, AgentIDs: []string{"a"}}, "/agent_ids"},
		{"empty agent id", KeyRequest{Role: gyre.RoleAgent, AgentIDs: []string{"a", ""}}, "/agent_ids/1"},
		{"slash in agent id", KeyRequest{Role: gyre.RoleAgent, AgentIDs: []string{"a/b"}}, "/agent_ids/0"},
		{"long name", KeyRequest{Role: gyre.RoleReader, Name: strings.Repeat("n", 256)}, "/name"},
		{"control in name", KeyRequest{Role: gyre.RoleReader, Name: "a\tb"}, "/name"},
	}
	for _, tt := range tests {
		err := tt.req.Validate()
		if tt.pointer == "" {
			if err != nil {
				t.Errorf("%s: Validate = %v, want nil", tt.name, err)
			}
			continue
		}
		var ge *gyre.Error
		if !errors.As(err, &ge) || ge.Code != gyre.CodeInvalidBody || ge.Pointer != tt.pointer {
			t.Errorf("%s: Validate = %v, want invalid_body at %s", tt.name, err, tt.pointer)
		}
	}
}

type fakeCreator struct {
	create func(ctx context.Context, k store.NewKey) (gyre.APIKey, error)
}

func (f fakeCreator) CreateKey(ctx context.Context, k store.NewKey) (gyre.APIKey, error) {
	return f.create(ctx, k)
}

func TestCreateKey(t *testing.T) {
	t.Parallel()
	var stored store.NewKey
	s := fakeCreator{create: func(_ context.Context, k store.NewKey) (gyre.APIKey, error) {
		stored = k
		return gyre.APIKey{ID: "id", TenantID: k.TenantID, Role: k.Role, AgentIDs: k.AgentIDs, Name: k.Name}, nil
	}}
	k, secret, err := CreateKey(context.Background(), s, "t", KeyRequest{Role: gyre.RoleAgent, AgentIDs: []string{"a", "b", "a"}, Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if !WellFormed(secret) || stored.Hash != Hash(secret) {
		t.Fatalf("stored hash is not the hash of the returned secret")
	}
	if stored.TenantID != "t" || stored.Role != gyre.RoleAgent || stored.Name != "n" {
		t.Fatalf("stored %+v", stored)
	}
	if got := strings.Join(k.AgentIDs, ","); got != "a,b" {
		t.Fatalf("agent ids = %q, want duplicates dropped: a,b", got)
	}

	_, _, err = CreateKey(context.Background(), fakeCreator{create: func(context.Context, store.NewKey) (gyre.APIKey, error) {
		t.Fatal("an invalid request reached the store")
		return gyre.APIKey{}, nil
	}}, "t", KeyRequest{Role: "nope"})
	if gyre.ErrorCode(err) != gyre.CodeInvalidBody {
		t.Fatalf("invalid request: %v", err)
	}
}
