package auth

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// knownSchemes are the schemes reported by name; anything else is "other",
// because a client that sends a bare token with no scheme would otherwise
// have its token reported as the scheme.
var knownSchemes = map[string]bool{
	"bearer": true, "basic": true, "digest": true, "negotiate": true, "ntlm": true,
	"dpop": true, "hoba": true, "mutual": true, "aws4-hmac-sha256": true,
	"scram-sha-1": true, "scram-sha-256": true, "vapid": true, "privatetoken": true,
}

// judgedSchemes are the schemes whose credentials are access tokens the
// appliance judges: Bearer (RFC 6750) and DPoP (RFC 9449 §7.1, a
// sender-constrained access token whose audience matters just as much). On a
// checked route every other scheme is refused (Checker.Check): a server that
// reads a token from it (a bare JWT, "Token x", a Basic password that is a
// JWT) would otherwise be handed a credential nobody judged.
var judgedSchemes = map[string]bool{"bearer": true, "dpop": true}

// splitHeader separates the auth scheme from its credentials (RFC 9110
// §11.4), splitting as the most lenient server does: the Go SDK splits with
// strings.Fields (every Unicode space, over UTF-8), Python's str.split()
// over a value decoded as Latin-1 also splits on \x1c-\x1f and the lone
// bytes 0x85 and 0xa0, a JavaScript /\s+/ also on U+FEFF, and every one of
// them reads the scheme case-insensitively. Anything these separators
// surround is the scheme and the credentials; a judged scheme's credentials
// must then be one b64token (RFC 6750 §2.1), which holds no separator, so
// that every server that reads a token from the value reads this one: the
// TypeScript SDK (split(' '), second element), the Python SDK ("bearer "
// prefix, the rest) and the Go SDK (exactly two fields) alike. Only SP and
// HTAB may follow the token, as every HTTP parser strips them from a field
// value: another trailing separator would stay in the token a server reads
// (Go's strings.Fields does not split on a lone 0xa0 byte), so it is refused
// rather than trimmed. A value that has anything more is refused rather
// than guessed.
func splitHeader(h string) (scheme, cred string, err error) {
	h = strings.TrimRight(trimLeftSeparators(h), " \t")
	if h == "" {
		return "", "", errors.New("empty authorization header")
	}
	i, n := nextSeparator(h)
	name, rest := h, ""
	if i >= 0 {
		name, rest = h[:i], trimLeftSeparators(h[i+n:])
	}
	scheme = strings.ToLower(name)
	if !knownSchemes[scheme] || !isToken(name) {
		scheme = "other"
	}
	if !judgedSchemes[scheme] {
		return scheme, "", nil
	}
	if !isB64Token(rest) {
		return scheme, "", errors.New(scheme + " credentials are not one b64token")
	}
	return scheme, rest, nil
}

// separatorAt reports the length of the separator that starts s (0: none).
// A valid UTF-8 rune is a separator when Go's unicode.IsSpace or
// JavaScript's \s says so; a lone byte when Python's str.isspace says so of
// it decoded as Latin-1 (\t-\r, \x1c-\x1f, space, 0x85, 0xa0).
func separatorAt(s string) int {
	c := s[0]
	if c < utf8.RuneSelf {
		if c == ' ' || ('\t' <= c && c <= '\r') || (0x1c <= c && c <= 0x1f) {
			return 1
		}
		return 0
	}
	if r, n := utf8.DecodeRuneInString(s); n > 1 && (unicode.IsSpace(r) || r == '\ufeff') {
		return n
	}
	if c == 0x85 || c == 0xa0 {
		return 1
	}
	return 0
}

// nextSeparator is the index and length of the first separator in s, or -1.
func nextSeparator(s string) (int, int) {
	for i := 0; i < len(s); i++ {
		if n := separatorAt(s[i:]); n > 0 {
			return i, n
		}
	}
	return -1, 0
}

// trimLeftSeparators removes the separators s starts with.
func trimLeftSeparators(s string) string {
	for len(s) > 0 {
		n := separatorAt(s)
		if n == 0 {
			break
		}
		s = s[n:]
	}
	return s
}

// isToken: RFC 9110 §5.6.2 token characters only (an auth-scheme is a token).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf || !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func isB64Token(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		if !isB64TokenChar(body[i]) {
			return false
		}
	}
	return true
}

func isB64TokenChar(b byte) bool { return b64tokenChars[b] }

var b64tokenChars = func() (t [256]bool) {
	for _, c := range "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~+/" {
		t[c] = true
	}
	return t
}()

// looksLikeJWS reports whether a bearer token has the three-part shape of
// a JWS compact serialization; a JWE (five parts) is opaque to us.
func looksLikeJWS(tok string) bool {
	return strings.Count(tok, ".") == 2
}

// SplitAuthorization is splitHeader for other packages (the credentials stage): the scheme,
// lower-cased ("other" for one not known), and a judged scheme's one b64token; an error when the
// value is one that servers would read differently.
func SplitAuthorization(h string) (scheme, cred string, err error) { return splitHeader(h) }
