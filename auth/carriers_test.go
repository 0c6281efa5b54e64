package auth

import (
	"context"
	"testing"
)

// TestCheckRequestCarriers (issue 29 item 9): the query and cookie carriers, and that neither ever
// makes the request's credential.
func TestCheckRequestCarriers(t *testing.T) {
	rk, _, _ := testKeys(t)
	c, _ := newTestChecker(t, Options{})
	right, wrong := sign(t, rk, claims(canon)), sign(t, rk, claims("https://a.example/mcp"))
	tests := []struct {
		name    string
		cr      Credentials
		kind    string // "" passes
		reason  string
		present bool
	}{
		{name: "nothing", cr: Credentials{Target: "/mcp"}},
		{name: "query token", cr: Credentials{Target: "/mcp?access_token=" + right}, kind: KindCarrier, reason: "MCP forbids tokens in the query"},
		{name: "query token beside a header", cr: Credentials{Target: "/mcp?Access_Token=x", Authorization: bearer(right)}, kind: KindCarrier, reason: "access_token", present: true},
		{name: "query token as an array", cr: Credentials{Target: "/mcp?access_token[]=x"}, kind: KindCarrier, reason: "access_token"},
		{name: "query token, PHP name", cr: Credentials{Target: "/mcp?access.token=x"}, kind: KindCarrier, reason: "access_token"},
		{name: "query token, escaped with plus", cr: Credentials{Target: "/mcp?+access%5Ftoken=x"}, kind: KindCarrier, reason: "access_token"},
		{name: "query token after a fragment", cr: Credentials{Target: "/mcp?a#access_token=x"}, kind: KindCarrier, reason: "access_token"},
		{name: "another parameter", cr: Credentials{Target: "/mcp?access_tokens=x&token=y&x=access_token"}},
		{name: "cookie JWT, wrong audience", cr: Credentials{Target: "/mcp", Cookies: []string{"sid=1; at=" + wrong}}, kind: KindAudience, reason: "cookie: token audience"},
		{name: "cookie JWT in a second header", cr: Credentials{Target: "/mcp", Cookies: []string{"sid=1", "at=" + wrong}}, kind: KindAudience, reason: "cookie:"},
		{name: "cookie JWT after a comma", cr: Credentials{Target: "/mcp", Cookies: []string{"sid=1, at=" + wrong}}, kind: KindAudience, reason: "cookie:"},
		{name: "cookie JWT, right audience, not a credential", cr: Credentials{Target: "/mcp", Cookies: []string{"at=" + right}}},
		{name: "cookie JWT, right, beside a header", cr: Credentials{Target: "/mcp", Cookies: []string{"at=" + right}, Authorization: bearer(right)}, present: true},
		{name: "cookie JWT, wrong, beside a right header", cr: Credentials{Target: "/mcp", Cookies: []string{"at=" + wrong}, Authorization: bearer(right)}, kind: KindAudience, reason: "cookie:", present: true},
		{name: "cookie that only looks like a JWT", cr: Credentials{Target: "/mcp", Cookies: []string{"v=1.2.3; ga=GA1.2.3.4"}}},
		{name: "cookie JWS-shaped but malformed", cr: Credentials{Target: "/mcp", Cookies: []string{"at=eyJhbGciOiJub25lIn0.e30.x"}}, kind: KindMalformed, reason: "cookie:"},
		{name: "session cookie", cr: Credentials{Target: "/mcp", Cookies: []string{"sid=0123456789abcdef"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := c.CheckRequest(context.Background(), tt.cr, canon)
			assertNoToken(t, append(append([]string{tt.cr.Target}, tt.cr.Cookies...), tt.cr.Authorization...), r, err)
			expect(t, r, err, tt.kind, tt.reason)
			if r.Present != tt.present {
				t.Errorf("Present = %v, want %v", r.Present, tt.present)
			}
			if !tt.present && (r.Claims.Sub != "" || len(r.Claims.Aud) != 0) {
				t.Errorf("claims from a cookie or the query: %+v", r.Claims)
			}
		})
	}
}

// TestTargetAuthority: absolute-form targets and their authorities compared as servers compare
// them (item 8).
func TestTargetAuthority(t *testing.T) {
	tests := []struct {
		name, target, host string
		scheme             string // "" when not absolute-form
		same               bool
		// ambiguous: parsers read the target's server differently (user info, a backslash), so
		// a checked route refuses it whatever SameAuthority says
		ambiguous bool
	}{
		{name: "origin-form", target: "/mcp?x=http://a"},
		{name: "asterisk", target: "*"},
		{name: "same", target: "http://mcp.test/mcp", host: "mcp.test", scheme: "http", same: true},
		{name: "case and trailing dot", target: "HTTP://MCP.test./mcp", host: "mcp.TEST", scheme: "http", same: true},
		{name: "default port written", target: "http://mcp.test:80/mcp", host: "mcp.test", scheme: "http", same: true},
		{name: "https default port", target: "https://mcp.test/mcp", host: "mcp.test:443", scheme: "https", same: true},
		{name: "user info aside", target: "http://a@b@mcp.test/mcp", host: "mcp.test", scheme: "http", same: true, ambiguous: true},
		{name: "user info", target: "http://u:p@mcp.test/mcp", host: "mcp.test", scheme: "http", same: true, ambiguous: true},
		// WHATWG URL (new URL()) ends a special scheme's authority at a backslash: its host is
		// victim.test, the path /@mcp.test/mcp
		{name: "backslash before the user info", target: "http://victim.test\\@mcp.test/mcp", host: "mcp.test", scheme: "http", ambiguous: true},
		{name: "backslash as the path", target: "http://mcp.test\\mcp", host: "mcp.test", scheme: "http", same: true, ambiguous: true},
		{name: "backslash in the path", target: "http://mcp.test/a\\b", host: "mcp.test", scheme: "http", same: true, ambiguous: true},
		{name: "at sign in the path", target: "http://mcp.test/a@b", host: "mcp.test", scheme: "http", same: true},
		{name: "IPv6", target: "http://[::1]:8080/mcp", host: "[0:0::1]:8080", scheme: "http", same: true},
		{name: "another host", target: "http://victim.test/mcp", host: "mcp.test", scheme: "http"},
		{name: "another port", target: "http://mcp.test:8080/mcp", host: "mcp.test", scheme: "http"},
		{name: "empty port", target: "http://mcp.test:/mcp", host: "mcp.test", scheme: "http"},
		{name: "no host", target: "http:///mcp", host: "mcp.test", scheme: "http"},
		{name: "host with a path in the query", target: "http://victim.test?/mcp", host: "mcp.test", scheme: "http"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scheme, a, ok := TargetAuthority(tt.target)
			if ok != (tt.scheme != "") || scheme != tt.scheme {
				t.Fatalf("TargetAuthority(%q) = %q, %q, %v", tt.target, scheme, a, ok)
			}
			if ok && SameAuthority(scheme, a, tt.host) != tt.same {
				t.Errorf("SameAuthority(%q, %q, %q) = %v, want %v", scheme, a, tt.host, !tt.same, tt.same)
			}
			if why := AmbiguousTarget(tt.target); (why != "") != tt.ambiguous {
				t.Errorf("AmbiguousTarget(%q) = %q, want ambiguous %v", tt.target, why, tt.ambiguous)
			}
		})
	}
}

func TestTargetPath(t *testing.T) {
	for target, want := range map[string]string{
		"/mcp": "/mcp", "/mcp?access_token=x": "/mcp", "/a#f": "/a",
		"http://h.test/mcp?q": "/mcp", "https://h.test": "/", "*": "*",
	} {
		if got := TargetPath(target); got != want {
			t.Errorf("TargetPath(%q) = %q, want %q", target, got, want)
		}
	}
}
