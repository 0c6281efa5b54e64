package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mcpintercept/integrity"
)

// FuzzAdminURL: an --admin value is refused or normalised to an http(s) URL without a trailing
// slash, query or fragment, which normalises to itself.
func FuzzAdminURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:9464", "127.0.0.1:9464", "https://[::1]:9464/", "ftp://x", "http://", "a b", "http://h/p?q#f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := NormalizeURL(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") || strings.HasSuffix(u, "/") || strings.ContainsAny(u, "?#") {
			t.Fatalf("NormalizeURL(%q) = %q", s, u)
		}
		again, err := NormalizeURL(u)
		if err != nil || again != u {
			t.Fatalf("NormalizeURL(%q) = %q, then %q %v", s, u, again, err)
		}
	})
}

// TestClientErrors: what a failed call says, per endpoint: the status, the first line of the
// body (printable), and the hint of the status; a token that cannot be read, a listener that
// does not answer.
func TestClientErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tools/approve", "/observe":
			http.Error(w, "needs the admin token\x1b\nsecond line", http.StatusUnauthorized)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	tok := filepath.Join(dir, "admin.token")
	os.WriteFile(tok, []byte("x\n"), 0o600)
	c := NewClient(srv.URL, tok, "admin.token")
	_, _, err := c.Tools()
	if want := "the admin listener at " + srv.URL + " answered 404 Not Found: 404 page not found (an appliance that predates tool integrity, or no route sets tool_pins)"; err == nil || err.Error() != want {
		t.Errorf("Tools: %v, want %s", err, want)
	}
	_, err = c.Approve(ToolApproval{Server: "s", Kind: integrity.KindTool, Name: "n"})
	if want := "the admin listener at " + srv.URL + ` answered 401 Unauthorized: "needs the admin token\x1b" (the token in ` + tok + " is not the appliance's: pass --config or --token-file with its tool_integrity.dir/admin.token)"; err == nil || err.Error() != want {
		t.Errorf("Approve: %v, want %s", err, want)
	}
	var se *StatusError
	if _, err = c.Observe(context.Background(), url.Values{}); !errors.As(err, &se) || se.Code != http.StatusUnauthorized ||
		!strings.HasSuffix(err.Error(), " (the token in "+tok+" is not the appliance's: pass --config or --token-file)") {
		t.Errorf("Observe: %v", err)
	}
	none := NewClient(srv.URL, filepath.Join(dir, "none"), "admin.token")
	var te *TokenError
	if err := none.ObserveToken(); !errors.As(err, &te) || !strings.HasPrefix(err.Error(), "cannot read the admin token: ") ||
		!strings.HasSuffix(err.Error(), "(the appliance makes <tool_integrity.dir>/admin.token when it starts with admin.listen on; pass --config or --token-file)") {
		t.Errorf("ObserveToken: %v", err)
	}
	if _, err := none.Approve(ToolApproval{}); !errors.As(err, &te) || !strings.HasSuffix(err.Error(), "(the appliance makes it in tool_integrity.dir when it starts; pass --config or --token-file)") {
		t.Errorf("Approve without a token: %v", err)
	}
	srv.Close()
	var ue *UnreachableError
	if _, err := c.PinFile(); !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "cannot reach the appliance's admin listener at "+srv.URL+": ") {
		t.Errorf("PinFile, closed: %v", err)
	}
}

// TestObserveStream: keepalives are skipped; a record, a line that is not one and the end line
// are told apart; the stream then ends.
func TestObserveStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Query().Get("tool") != "echo" {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		io.WriteString(w, "\n"+`{"flow":"f-1","mcp_name":"echo"}`+"\n\n[\n"+`{"observe":"end","reason":"bye"}`+"\n")
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "admin.token")
	os.WriteFile(tok, []byte("tok"), 0o600)
	st, err := NewClient(srv.URL, tok, "admin.token").Observe(context.Background(), url.Values{"tool": {"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var got []string
	for {
		it, ok := st.Next()
		if !ok {
			break
		}
		switch {
		case it.End:
			got = append(got, "end "+it.Reason)
		case it.Err != nil:
			got = append(got, "bad "+string(it.Line))
		default:
			got = append(got, "record "+it.Record.MCPName)
		}
	}
	if strings.Join(got, "|") != "record echo|bad [|end bye" || st.Err() != nil {
		t.Errorf("items %q, err %v", got, st.Err())
	}
}
