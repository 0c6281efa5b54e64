package policy

import (
	"testing"
)

// The auth variable: rules allow a tool to some subjects or scopes only (issue 19), and a route
// that checks no token leaves every auth field absent.
func TestAuthVariable(t *testing.T) {
	rules := []RuleSpec{
		{Name: "no-mallory", Action: RuleDeny, When: `auth.claims.sub == "mallory"`},
		{Name: "admins", Action: RuleAllow, When: `"admin" in auth.claims.scope.split(" ") && "https://a.example/mcp" in auth.claims.aud && auth.verified`},
		{Name: "anonymous", Action: RuleDeny, When: `!auth.present`},
	}
	set, err := Compile(rules)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		auth *Auth
		want string // the deciding rule
	}{
		{"mallory", &Auth{Present: true, Scheme: "bearer", Claims: Claims{Sub: "mallory"}}, "no-mallory"},
		{"verified admin", &Auth{Present: true, Scheme: "bearer", Verified: true, Claims: Claims{Sub: "alice", Scope: "read admin", Aud: []string{"https://a.example/mcp"}}}, "admins"},
		{"no header", &Auth{}, "anonymous"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := set.Evaluate(&Input{Vars: Vars{Auth: tt.auth}})
			if d.Rule != tt.want {
				t.Errorf("decided by %q (%s, errors %v), want %q", d.Rule, d.Action, d.Errors, tt.want)
			}
		})
	}
}
