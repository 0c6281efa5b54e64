package auth

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
)

// bearerAuthJS is the TypeScript SDK's bearer middleware, installed by scripts/deps.sh (npm ci in
// e2e/node).
var bearerAuthJS = filepath.Join("..", "e2e", "node", "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm", "server", "auth", "middleware", "bearerAuth.js")

// authorizationValues are generated Authorization values: schemes in several cases (and none)
// around every separator some server splits on, with leading and trailing bytes, around a
// JWT-shaped and an opaque token.
func authorizationValues() []string {
	schemes := []string{"Bearer", "bearer", "BEARER", "DPoP", "dpop", "Basic", "Token", "", "Bearer,", "Bear er"}
	seps := []string{" ", "  ", "\t", " \t", "\xc2\xa0", "\xa0", "\x85", "\xc2\x85", "\xe3\x80\x80", "\xe2\x80\x8b",
		"\xef\xbb\xbf", "\x1c", "\x1f", "\x0b", "\x0c", "\r", "\n", "", ",", "\x00"}
	leads := []string{"", " ", "\t", "\xa0", "\xc2\xa0", "\x1c"}
	trails := []string{"", " ", "\t", " x", "\tx", ",", "\xa0", "\xc2\xa0", "=", " Bearer y"}
	toks := []string{"eyJhbGciOiJIUzI1NiJ9.eyJhdWQiOiJ4In0.c2ln", "opaque-0123456789~+/="}
	var out []string
	for _, s := range schemes {
		for _, sep := range seps {
			for _, l := range leads {
				for _, tr := range trails {
					for _, tok := range toks {
						out = append(out, l+s+sep+tok+tr)
					}
				}
			}
		}
	}
	out = append(out, "", " ", "Bearer", "Bearer ", "Bearer \t ", "bearer\t", "\tBearer\t\t")
	// Every HTTP parser (net/http, llhttp, h11, the appliance's own) strips SP and HTAB around a
	// field value before any of this code sees it.
	for i, v := range out {
		out[i] = strings.Trim(v, " \t")
	}
	return out
}

// peerTokens is, per peer, the token it would read from each value ("" with ok false: none).
type peerToken struct {
	tok string
	ok  bool
}

// goSDKTokens runs the Go SDK's own RequireBearerToken middleware (exported; it splits with
// strings.Fields in its unexported verify) over each value, with a verifier that records the
// token it is handed.
func goSDKTokens(t *testing.T, values []string) []peerToken {
	out := make([]peerToken, len(values))
	for i, v := range values {
		var got *string
		verifier := func(_ context.Context, token string, _ *http.Request) (*sdkauth.TokenInfo, error) {
			got = &token
			return &sdkauth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
		}
		h := sdkauth.RequireBearerToken(verifier, nil)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		req := httptest.NewRequest("POST", "http://mcp.test/mcp", nil)
		req.Header["Authorization"] = []string{v}
		h.ServeHTTP(httptest.NewRecorder(), req)
		if got != nil {
			out[i] = peerToken{*got, true}
		}
	}
	return out
}

// tsSDKTokens runs the TypeScript SDK's requireBearerAuth in node over every value at once.
func tsSDKTokens(t *testing.T, values []string) []peerToken {
	var out []*string
	runPeer(t, values, &out, "node", filepath.Join("testdata", "bearer-peers.mjs"), bearerAuthJS)
	return decodePeer(t, out)
}

// pythonSplit is what Python servers read, over the value decoded as Latin-1 as Starlette and the
// WSGI servers decode headers:
//   - "split": a server that reads value.split() into exactly scheme and token (str.split() splits
//     on every str.isspace character: \x1c-\x1f, \x85 and \xa0 too);
//   - "bytes": one that splits the raw bytes (Django REST framework's
//     get_authorization_header().split(): ASCII whitespace only);
//   - "sdk": the MCP Python SDK's BearerAuthBackend, reproduced here because the package is not
//     installed on this machine: value.lower().startswith("bearer ") and the rest, value[7:], as
//     it is (mcp/server/auth/middleware/bearer_auth.py).
const pythonSplit = `
import base64, json, sys
def b(s): return None if s is None else base64.b64encode(s.encode('latin-1')).decode()
def split(v):
    f = v.split()
    return f[1] if len(f) == 2 and f[0].lower() == 'bearer' else None
def raw(v):
    f = v.encode('latin-1').split()
    return f[1].decode('latin-1') if len(f) == 2 and f[0].lower() == b'bearer' else None
def sdk(v):
    return v[7:] if v and v.lower().startswith('bearer ') else None
vals = [base64.b64decode(x).decode('latin-1') for x in json.load(sys.stdin)]
json.dump({'split': [b(split(v)) for v in vals], 'bytes': [b(raw(v)) for v in vals], 'sdk': [b(sdk(v)) for v in vals]}, sys.stdout)
`

func pythonTokens(t *testing.T, values []string) map[string][]peerToken {
	var out map[string][]*string
	runPeer(t, values, &out, "python3", "-c", pythonSplit)
	res := map[string][]peerToken{}
	for k, v := range out {
		res[k] = decodePeer(t, v)
	}
	return res
}

func runPeer(t *testing.T, values []string, out any, name string, args ...string) {
	t.Helper()
	in := make([]string, len(values))
	for i, v := range values {
		in[i] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(b)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s", name, err, stderr.String())
	}
	if err := json.Unmarshal(res, out); err != nil {
		t.Fatalf("%s output: %v", name, err)
	}
}

func decodePeer(t *testing.T, in []*string) []peerToken {
	out := make([]peerToken, len(in))
	for i, s := range in {
		if s == nil {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(*s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = peerToken{string(b), true}
	}
	return out
}

// needPeers skips where the peers are not installed, except in CI (make test installs them).
func needPeers(t *testing.T) {
	t.Helper()
	var missing []string
	for _, bin := range []string{"node", "python3"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if _, err := os.Stat(bearerAuthJS); err != nil {
		missing = append(missing, "the TypeScript SDK (make deps: npm ci in e2e/node)")
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("peers missing: %s", strings.Join(missing, ", "))
	}
	t.Skipf("peers missing: %s", strings.Join(missing, ", "))
}

// TestAuthorizationDifferential (issue 29 item 7): for each generated Authorization value, every
// peer's own splitting (the Go SDK's middleware, the TypeScript SDK's middleware in node, Python's
// split() and the Python SDK's prefix rule) says which token a server would read; whenever one
// would read a token, the appliance must judge that same token or refuse the request.
//
// RFC 6750 allows several spaces after "Bearer", and the appliance judges the token after them.
// Two peers then hand their verifier the token with separators in front: the Python SDK (the rest
// after "bearer ") and the TypeScript SDK (split(' ') with a tab after the space). A verifier
// either refuses that string or reads the same token from it (a base64url decoder that skips
// whitespace, as Node's Buffer and Python's b64decode do, decodes the same JWT; an exact lookup
// finds nothing), never another token, so a peer's token is compared with leading separators
// trimmed. Trailing ones are not trimmed: a token followed by anything but SP or HTAB (which
// every HTTP parser strips) is refused.
func TestAuthorizationDifferential(t *testing.T) {
	needPeers(t)
	values := authorizationValues()
	peers := map[string][]peerToken{"go-sdk": goSDKTokens(t, values), "ts-sdk": tsSDKTokens(t, values)}
	for k, v := range pythonTokens(t, values) {
		peers["python-"+k] = v
	}
	checker, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]int{}
	var bad, passed, passedRead int
	for i, v := range values {
		scheme, cred, err := splitHeader(v)
		judged := err == nil && judgedSchemes[scheme]
		if !judged {
			// Whatever is not judged is refused by the checker, never passed.
			if _, cerr := checker.Check(context.Background(), []string{v}, canon); !errors.Is(cerr, ErrRefused) {
				passed++
				var readers []string
				for name, toks := range peers {
					if toks[i].ok {
						readers = append(readers, name)
					}
				}
				if len(readers) > 0 {
					passedRead++
				}
				if passed <= 20 {
					t.Errorf("%q: not judged (scheme %q, %v) and not refused (%v); a token is read from it by %v", v, scheme, err, cerr, readers)
				}
			}
		}
		for name, toks := range peers {
			p := toks[i]
			if !p.ok {
				continue
			}
			read[name]++
			tok := trimLeftSeparators(p.tok)
			if judged && cred != tok {
				bad++
				if bad <= 20 {
					t.Errorf("%q: %s reads token %q, the appliance judges %q", v, name, p.tok, cred)
				}
			}
		}
	}
	if passed > 0 {
		t.Errorf("%d of %d values passed unjudged; a peer reads a token from %d of them", passed, len(values), passedRead)
	}
	if bad > 0 {
		t.Errorf("%d times a peer reads another token than the appliance judges", bad)
	}
	// The differential means something only if every peer read tokens from some values.
	for name := range peers {
		if read[name] == 0 {
			t.Errorf("%s read no token from any of the %d values", name, len(values))
		}
	}
	t.Logf("%d values; tokens read per peer: %v", len(values), read)
}
