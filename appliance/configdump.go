package appliance

import (
	"fmt"
	"strings"
	"unicode"

	"cel.dev/cel-go/parser/gen"
	"github.com/antlr4-go/antlr/v4"
	"go.yaml.in/yaml/v3"

	"mcpintercept/admin"
	"mcpintercept/config"
)

// GET /config_dump on the admin listener: the configuration in effect, with the spellings and
// keys of the file (defaults filled in), as JSON (or YAML with ?format=yaml). It needs the admin
// token, as /observe does. Values that may be secrets are replaced by Elided: every value of a
// headers map (telemetry.otlp.headers carries collector credentials), any key that names a
// credential (authorization, cookie, password, secret, api key, a token that is not a policy
// setting); in every URL the whole user information (a token is as often the user name as the
// password), each query value (the keys stay) and the fragment; and in the rules' CEL (when,
// rate_limit.key) every literal — string, bytes, number — and every comment, the rest of the
// expression as written; every redact pattern and tool_integrity pattern regex (a pattern may be
// the secret it hides: a key prefix, a canary), their count and names kept. A URL with an '@'
// past its authority is elided after its scheme (a password with an unescaped '/' ends the
// authority early). A rule's reason is the operator's prose and stays. Paths to secret files stay: they say where a secret is, not what it is.

// Elided replaces a secret value in /config_dump.
const Elided = "[elided]"

// runningConfig is the configuration in effect: the last one a reload applied, else the one New
// was given. (A reload applies routes, rules and the pin file; the sections it cannot apply
// without a restart are logged as such and are still the file's in the dump.)
func (a *Appliance) runningConfig() (cfg *config.Config, reloaded bool) {
	if c := a.running.Load(); c != nil {
		return c, true
	}
	return a.cfg, false
}

// configDump is GET /config_dump's body: the running configuration, secrets elided.
func (a *Appliance) configDump() (admin.ConfigDump, error) {
	cfg, reloaded := a.runningConfig()
	tree, err := DumpConfig(cfg)
	if err != nil {
		return admin.ConfigDump{}, err
	}
	return admin.ConfigDump{Path: cfg.Path, Reloaded: reloaded, Config: tree}, nil
}

// DumpConfig returns cfg as a tree of maps, lists and scalars keyed as the file is, secrets
// elided (see Elided).
func DumpConfig(cfg *config.Config) (any, error) {
	// Through YAML: the config's own marshallers write the file's spellings (ports, durations,
	// default_route), which encoding/json of the structs would not.
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	var tree any
	if err := yaml.Unmarshal(b, &tree); err != nil {
		return nil, fmt.Errorf("unmarshal: %w", err)
	}
	// The rules first: their literals go whole, URLs inside them included, before the generic
	// walk (which would otherwise cut a URL inside a string literal, not the literal).
	elideRules(tree)
	return elide(tree, ""), nil
}

// elideRules replaces the literals of every rule's CEL (when, rate_limit.key) in the tree.
func elideRules(tree any) {
	top, _ := tree.(map[string]any)
	sets, _ := top["rule_sets"].(map[string]any)
	for _, set := range sets {
		rules, _ := set.([]any)
		for _, r := range rules {
			rule, _ := r.(map[string]any)
			if w, ok := rule["when"].(string); ok {
				rule["when"] = ElideCEL(w)
			}
			if rl, ok := rule["rate_limit"].(map[string]any); ok {
				if k, ok := rl["key"].(string); ok {
					rl["key"] = ElideCEL(k)
				}
			}
			// A redact pattern is what must not be seen (an API key's prefix, a literal
			// canary): each goes whole, the count stays. Paths name places, not values.
			if rd, ok := rule["redact"].(map[string]any); ok {
				elideEach(rd["patterns"])
			}
		}
	}
	// tool_integrity.patterns are of the same kind (a canary scanned for in definitions): the
	// regex goes, the finding's name stays.
	if ti, ok := top["tool_integrity"].(map[string]any); ok {
		ps, _ := ti["patterns"].([]any)
		for _, p := range ps {
			if m, ok := p.(map[string]any); ok && m["regex"] != nil {
				m["regex"] = Elided
			}
		}
	}
}

// elideEach replaces every element of the list v (when it is one) by Elided.
func elideEach(v any) {
	l, _ := v.([]any)
	for i := range l {
		l[i] = Elided
	}
}

// ElideCEL replaces every literal of a CEL expression and every comment by Elided, keeping the
// rest as written: a string keeps its prefix and quotes ("x" → "[elided]", r'x' → r'[elided]',
// b"""x""" → b"""[elided]"""), a number becomes [elided], a comment // [elided]. It runs CEL's
// own lexer (the one cel-go's parser runs), so escaped quotes, raw, triple-quoted and bytes
// literals end where CEL ends them. Source the lexer rejects is elided whole.
func ElideCEL(src string) string {
	lex := gen.NewCELLexer(antlr.NewInputStream(src))
	var errs lexErrors
	lex.RemoveErrorListeners() // the default one prints to stderr
	lex.AddErrorListener(&errs)
	runes := []rune(src) // the input stream's indices are runes
	var b strings.Builder
	last := 0
	for {
		tok := lex.NextToken()
		if tok == nil || tok.GetTokenType() == antlr.TokenEOF {
			break
		}
		var repl string
		switch tok.GetTokenType() {
		case gen.CELLexerSTRING, gen.CELLexerBYTES:
			repl = elidedLiteral(tok.GetText())
		case gen.CELLexerNUM_INT, gen.CELLexerNUM_UINT, gen.CELLexerNUM_FLOAT:
			repl = Elided
		case gen.CELLexerCOMMENT:
			repl = "// " + Elided
		default:
			continue
		}
		start, stop := tok.GetStart(), tok.GetStop()+1
		if start < last || stop > len(runes) || start > stop {
			return Elided // never expected; never show what we could not place
		}
		b.WriteString(string(runes[last:start]))
		b.WriteString(repl)
		last = stop
	}
	if errs.n > 0 {
		return Elided
	}
	b.WriteString(string(runes[last:]))
	return b.String()
}

// elidedLiteral is Elided in the prefix and quotes of the string or bytes token lit.
func elidedLiteral(lit string) string {
	i := 0
	for i < len(lit) && i < 2 && strings.IndexByte("bBrR", lit[i]) >= 0 {
		i++
	}
	prefix, body := lit[:i], lit[i:]
	for _, q := range []string{`"""`, "'''", `"`, "'"} {
		if strings.HasPrefix(body, q) {
			return prefix + q + Elided + q
		}
	}
	return Elided
}

// lexErrors counts the lexer's errors.
type lexErrors struct {
	antlr.DefaultErrorListener
	n int
}

func (e *lexErrors) SyntaxError(antlr.Recognizer, any, int, int, string, antlr.RecognitionException) {
	e.n++
}

// elide walks v, the value at key, and replaces what may be a secret.
func elide(v any, key string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			switch {
			case strings.EqualFold(key, "headers"):
				// Header values are credentials as often as not (an OTLP collector's
				// Authorization, an API key header).
				if e != nil {
					v[k] = Elided
				}
			case secretKey(k) && e != nil && !isEmpty(e):
				v[k] = Elided
			default:
				v[k] = elide(e, k)
			}
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = elide(e, key)
		}
		return v
	case string:
		return elideURL(v)
	}
	return v
}

// secretKey says whether a key names a credential rather than where one is or how it is used.
func secretKey(k string) bool {
	k = strings.ToLower(strings.ReplaceAll(k, "-", "_"))
	for _, suffix := range []string{"_file", "_dir", "_path", "_url"} {
		if strings.HasSuffix(k, suffix) {
			return false
		}
	}
	switch k {
	case "token_audience", "opaque_tokens", "tokens", "max_header", "record_identity":
		return false // policy settings, not credentials
	}
	for _, s := range []string{"authorization", "cookie", "password", "passwd", "secret", "api_key", "apikey", "token", "bearer", "private_key", "credential"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case string:
		return v == ""
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// elideURL hides, in every URL of s (a run without white space that has "://"), the user
// information whole, each query value (the keys stay) and the fragment. It cuts as Go's net/url
// does: the fragment at the first '#', then the query at the first '?', the authority after
// "://" up to the next '/', the user information at the authority's last '@'.
func elideURL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	for s != "" {
		i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsSpace(r) })
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		s = s[i:]
		end := strings.IndexFunc(s, unicode.IsSpace)
		if end < 0 {
			end = len(s)
		}
		word := s[:end]
		if strings.Contains(word, "://") {
			word = elideOneURL(word)
		}
		b.WriteString(word)
		s = s[end:]
	}
	return b.String()
}

// elideOneURL elides the secrets of one URL.
//
// User information ends at the last '@' of the authority, and the authority at the first '/',
// '?', '#' or (WHATWG URL, special schemes) '\\'. An operator who writes a password or a token
// with one of those unescaped (base64 has '/') makes every parser end the authority early, and
// then the text before the first of them is part of the secret (https://user:pa/ss@host). Any
// text before the word's last '@' may be user information, so a URL with an '@' past its
// authority is elided whole after its scheme.
func elideOneURL(w string) string {
	if i := strings.Index(w, "://"); i >= 0 && !strings.ContainsAny(w[:i], "/?#") {
		r := w[i+3:]
		end := strings.IndexAny(r, "/?#\\")
		if end < 0 {
			end = len(r)
		}
		if strings.LastIndexByte(r, '@') >= end {
			return w[:i+3] + Elided
		}
	}
	w, frag, hasFrag := strings.Cut(w, "#")
	w, query, hasQuery := strings.Cut(w, "?")
	if i := strings.Index(w, "://"); i >= 0 {
		head, r := w[:i+3], w[i+3:]
		authority, path := r, ""
		if j := strings.IndexByte(r, '/'); j >= 0 {
			authority, path = r[:j], r[j:]
		}
		if j := strings.LastIndexByte(authority, '@'); j >= 0 {
			authority = Elided + authority[j:]
		}
		w = head + authority + path
	}
	if hasQuery {
		w += "?" + elideQuery(query)
	}
	if hasFrag {
		w += "#"
		if frag != "" {
			w += Elided
		}
	}
	return w
}

// elideQuery keeps each key=value's key and elides its value; a component without '=' is
// elided whole (it may be a bare token as well as a flag).
func elideQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, v, ok := strings.Cut(p, "=")
		switch {
		case ok && v != "":
			parts[i] = k + "=" + Elided
		case !ok && p != "":
			parts[i] = Elided
		}
	}
	return strings.Join(parts, "&")
}
