package auth

import (
	"errors"
	"strings"
)

// knownSchemes are the schemes reported by name; anything else is "other",
// because a client that sends a bare token with no scheme would otherwise
// have its token reported as the scheme.
var knownSchemes = map[string]bool{
	"bearer": true, "basic": true, "digest": true, "negotiate": true, "ntlm": true,
	"dpop": true, "hoba": true, "mutual": true, "aws4-hmac-sha256": true,
	"scram-sha-1": true, "scram-sha-256": true, "vapid": true, "privatetoken": true,
}

// splitHeader separates the auth scheme from its credentials (RFC 9110
// §11.4). A bearer credential must be a b64token (RFC 6750 §2.1): a server
// that reads a looser syntax differently from us would be judged on a
// token we did not see.
func splitHeader(h string) (scheme, cred string, err error) {
	h = strings.Trim(h, " \t")
	if h == "" {
		return "", "", errors.New("empty authorization header")
	}
	name, rest, _ := strings.Cut(h, " ")
	scheme = strings.ToLower(name)
	if !knownSchemes[scheme] {
		scheme = "other"
	}
	if scheme != "bearer" {
		return scheme, "", nil
	}
	cred = strings.TrimLeft(rest, " ")
	if !isB64Token(cred) {
		return scheme, "", errors.New("bearer credentials are not a b64token")
	}
	return scheme, cred, nil
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
