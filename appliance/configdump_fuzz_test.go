package appliance

import (
	"net/url"
	"strings"
	"testing"
	"unicode"

	"cel.dev/cel-go/parser/gen"
	"github.com/antlr4-go/antlr/v4"
)

// celTokens lexes src as CEL's parser does: the tokens of the default channel, comments (hidden)
// included, and whether the lexer reported an error.
func celTokens(src string) (toks []antlr.Token, bad bool) {
	lex := gen.NewCELLexer(antlr.NewInputStream(src))
	var errs lexErrors
	lex.RemoveErrorListeners()
	lex.AddErrorListener(&errs)
	for {
		tok := lex.NextToken()
		if tok.GetTokenType() == antlr.TokenEOF {
			return toks, errs.n > 0
		}
		if tok.GetTokenType() != gen.CELLexerWHITESPACE {
			toks = append(toks, tok)
		}
	}
}

// FuzzElideCEL: ElideCEL leaves no literal and no comment text, keeps every other token in
// order, and an expression that parsed still parses.
func FuzzElideCEL(f *testing.F) {
	for _, s := range []string{
		`mcp.method == "tools/call" && mcp.name in ["a", 'b']`,
		`x == "a\"b" || y == r"c\" || z == """d " e""" || w == '''f'''`,
		`b"\x00" == b'\377' && br"x\" != bR'y'`,
		"size(x) > 10 // note\n&& y == -4.5e3 && z == 7u && h == 0xFF",
		"x.`my-field` == {'k': [1, 2.0, \"v\"]}['k']",
		`client.pod.labels["mcp-tier"] == "untrusted"`,
		`x == "unterminated`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		out := ElideCEL(src)
		in, bad := celTokens(src)
		if bad {
			if out != Elided {
				t.Fatalf("source the lexer rejects must be elided whole: %q → %q", src, out)
			}
			return
		}
		got, bad := celTokens(out)
		if bad {
			t.Fatalf("the elided expression no longer lexes: %q → %q", src, out)
		}
		// The expected tokens: literals become their elided form, a number three tokens.
		var want []string
		for _, tok := range in {
			switch tok.GetTokenType() {
			case gen.CELLexerSTRING, gen.CELLexerBYTES:
				want = append(want, "lit:"+elidedLiteral(tok.GetText()))
			case gen.CELLexerNUM_INT, gen.CELLexerNUM_UINT, gen.CELLexerNUM_FLOAT:
				want = append(want, "[", "elided", "]")
			case gen.CELLexerCOMMENT:
				want = append(want, "// "+Elided)
			default:
				want = append(want, tok.GetText())
			}
		}
		var have []string
		for _, tok := range got {
			switch tok.GetTokenType() {
			case gen.CELLexerSTRING, gen.CELLexerBYTES:
				if b := tok.GetText(); !strings.Contains(b, Elided) || len(b) > len(Elided)+8 {
					t.Fatalf("a literal survived: %q → %q (%q)", src, out, b)
				}
				have = append(have, "lit:"+tok.GetText())
			case gen.CELLexerNUM_INT, gen.CELLexerNUM_UINT, gen.CELLexerNUM_FLOAT:
				t.Fatalf("a number survived: %q → %q (%q)", src, out, tok.GetText())
			default:
				have = append(have, tok.GetText())
			}
		}
		if strings.Join(have, "\x00") != strings.Join(want, "\x00") {
			t.Fatalf("the shape changed: %q → %q\n have %q\n want %q", src, out, have, want)
		}
		if celParses(src) == nil && celParses(out) != nil {
			t.Fatalf("parsed before, not after: %q → %q: %v", src, out, celParses(out))
		}
	})
}

// FuzzElideURL: read by Go's own net/url, the elided URL has no user information but the
// marker, no query value but the marker or empty, no fragment but the marker, and the same host
// and path — unless it was elided whole after its scheme (an '@' past the authority).
func FuzzElideURL(f *testing.F) {
	for _, s := range []string{
		"https://u:p@h.example/x?tenant=t1&sig=abc#frag",
		"https://tok@h.example/?a=1;b=2&c",
		"http://127.0.0.1:4318/v1/traces",
		"https://h/a@b?x=c@d#e@f",
		"https://h/?r=https://u:p@x/",
		"https://user:pa/ss@host.example/x",
		"https://AbC/dEf+g@h.example/?k=v#f",
		"https://user:pa\\ss@host.example/x",
	} {
		f.Add(s)
	}
	const marker = "ELIDED" // url.Parse refuses '[' in user information
	f.Fuzz(func(t *testing.T, s string) {
		out := elideURL(s)
		if again := elideURL(out); again != out {
			t.Fatalf("not stable: %q → %q → %q", s, out, again)
		}
		if strings.Contains(s, Elided) || strings.Contains(s, marker) || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
			return
		}
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" || !strings.Contains(s, "://") {
			return
		}
		u2, err := url.Parse(strings.ReplaceAll(out, Elided, marker))
		if err != nil {
			return // the input was odd enough that the marker made it invalid; nothing leaks by that
		}
		if u2.User != nil && u2.User.String() != marker {
			t.Fatalf("user information survived: %q → %q (%q)", s, out, u2.User.String())
		}
		for k, vs := range u2.Query() {
			for _, v := range vs {
				if v != "" && v != marker {
					t.Fatalf("query value %s=%q survived: %q → %q", k, v, s, out)
				}
			}
		}
		if u2.Fragment != "" && u2.Fragment != marker {
			t.Fatalf("fragment survived: %q → %q", s, out)
		}
		// an '@' past the authority elides all after the scheme: host, path and the rest
		if out == s[:strings.Index(s, "://")+3]+Elided {
			return
		}
		if u.Host != "" && u2.Host != u.Host {
			t.Fatalf("host changed: %q → %q (%q, want %q)", s, out, u2.Host, u.Host)
		}
		// Only a URL whose "://" follows its scheme keeps its path exactly: elsewhere ("a:/://u@h")
		// the cut elides more than net/url would call user information, which leaks nothing.
		if strings.HasPrefix(s, u.Scheme+"://") && u2.Path != u.Path {
			t.Fatalf("path changed: %q → %q (%q, want %q)", s, out, u2.Path, u.Path)
		}
	})
}
