package mcp

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestScopeMembers holds Scope.Members to what the decoder does: in params and params._meta each
// listed name is accepted spelt exactly and refused spelt with one letter's case changed, while
// an unlisted name is accepted either way. A rewriter relies on the list being the decoder's.
func TestScopeMembers(t *testing.T) {
	wrap := map[Scope]func(key string) string{
		ScopeParams: func(k string) string {
			return `{"jsonrpc":"2.0","id":1,"method":"m","params":{` + string(Quote(k)) + `:{}}}`
		},
		ScopeMeta: func(k string) string {
			return `{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{` + string(Quote(k)) + `:{}}}}`
		},
	}
	for scope, body := range wrap {
		names := scope.Members()
		if len(names) == 0 {
			t.Fatalf("scope %d lists no members", scope)
		}
		for _, name := range append(names, "unlisted") {
			listed := slices.Contains(names, name)
			if scope.Reads(name) != listed {
				t.Errorf("scope %d: Reads(%q) = %v, want %v", scope, name, !listed, listed)
			}
			if _, err := DecodeMessage([]byte(body(name)), DecodeOptions{}); err != nil {
				t.Errorf("scope %d: %q spelt exactly: %v", scope, name, err)
			}
			variant := toggleFirstLetter(name)
			if scope.Reads(variant) {
				t.Errorf("scope %d: Reads(%q) is true for a case variant", scope, variant)
			}
			_, err := DecodeMessage([]byte(body(variant)), DecodeOptions{})
			switch {
			case listed && !errors.Is(err, ErrCaseVariantKey):
				t.Errorf("scope %d: %q for %q: err = %v, want ErrCaseVariantKey", scope, variant, name, err)
			case !listed && err != nil:
				t.Errorf("scope %d: unlisted %q refused: %v", scope, variant, err)
			}
		}
	}
	if m := ScopeNone.Members(); m != nil || ScopeNone.Reads("name") {
		t.Errorf("ScopeNone lists %q", m)
	}
	m := ScopeError.Members()
	m[0] = "changed"
	if ScopeError.Members()[0] == "changed" {
		t.Error("Members returned the decoder's own slice")
	}
}

func toggleFirstLetter(s string) string {
	i := strings.IndexFunc(s, unicode.IsLetter)
	r := rune(s[i])
	if unicode.IsUpper(r) {
		r = unicode.ToLower(r)
	} else {
		r = unicode.ToUpper(r)
	}
	return s[:i] + string(r) + s[i+1:]
}
