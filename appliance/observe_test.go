package appliance

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mcpintercept/admin"
	"mcpintercept/config"
	"mcpintercept/telemetry"
)

// observeLike is pinnedLike with a rule set that denies the tool "delete".
const observeRules = `    rule_set: guard
rule_sets:
  guard:
    - name: no-delete
      when: 'mcp.method == "tools/call" && mcp.name == "delete"'
      action: deny
      reason: not here
`

// TestObserveEndpoint runs MCP calls through the engine and follows them on GET /observe: the
// token is required, the filter applies, the records come in order, the stream ends with a
// reason when the appliance stops; /ui and /ui/config need the token (or the login cookie).
func TestObserveEndpoint(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"hi"}]}}`, req.ID)
	}))
	defer up.Close()
	upAddr := netip.MustParseAddrPort(strings.TrimPrefix(up.URL, "http://"))
	dir := filepath.Join(t.TempDir(), "tools")
	src := strings.NewReplacer("DIR", dir, "EXTRA", "").Replace(pinnedLike)
	src = strings.Replace(src, "    on_divergence: quarantine\n", "    on_divergence: quarantine\n"+observeRules, 1)
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "observe.yaml"), src)
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Routes[0].Match.Ports = []config.PortRange{{From: upAddr.Port(), To: upAddr.Port()}}
	ln := loopbackListener(t)
	a, err := New(context.Background(), cfg, Options{Mechanism: &fakeMech{dst: upAddr}, Listeners: []*net.TCPListener{ln}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			a.Stop(context.Background())
		}
	}()
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, config.AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(raw))
	adminURL := "http://" + a.AdminAddr().String()

	for _, p := range []string{"/observe", "/ui", "/ui/config"} {
		if code, _ := adminDo(t, a, "GET", p, "", ""); code != 401 {
			t.Errorf("GET %s without the token: %d, want 401", p, code)
		}
		if code, _ := adminDo(t, a, "GET", p, strings.Repeat("0", 64), ""); code != 401 {
			t.Errorf("GET %s with a wrong token: %d, want 401", p, code)
		}
	}
	if code, _ := adminDo(t, a, "GET", "/observe?since=yesterday", token, ""); code != 400 {
		t.Errorf("bad since: %d, want 400", code)
	}
	if code, _ := adminDo(t, a, "GET", "/observe?buffer=0", token, ""); code != 400 {
		t.Errorf("bad buffer: %d, want 400", code)
	}

	open := func(query string) (*bufio.Scanner, func()) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", adminURL+"/observe?"+query, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("GET /observe?%s: %d", query, resp.StatusCode)
		}
		return bufio.NewScanner(resp.Body), func() { cancel(); resp.Body.Close() }
	}
	// Subscribed before the calls: no history asked, so only what follows.
	denials, closeDenials := open("decision=deny")
	defer closeDenials()
	all, closeAll := open("kind=message&route=pinned")
	defer closeAll()
	waitSubscribers := time.Now().Add(30 * time.Second)
	for a.live.hub.Subscribers() != 2 {
		if time.Now().After(waitSubscribers) {
			t.Fatal("subscribers never registered")
		}
		time.Sleep(5 * time.Millisecond)
	}

	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	call := func(id int, tool string) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, id, tool)
		req, _ := http.NewRequest("POST", up.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	tools := []string{"echo", "delete", "echo", "delete", "add"}
	for i, tool := range tools {
		call(i+1, tool)
	}

	next := func(s *bufio.Scanner) telemetry.FlowRecord {
		t.Helper()
		for s.Scan() {
			if len(s.Bytes()) == 0 {
				continue // keepalive
			}
			var r telemetry.FlowRecord
			if err := json.Unmarshal(s.Bytes(), &r); err != nil {
				t.Fatalf("line %q: %v", s.Text(), err)
			}
			return r
		}
		t.Fatalf("stream ended: %v", s.Err())
		return telemetry.FlowRecord{}
	}
	for i := 0; i < 2; i++ {
		r := next(denials)
		if r.Decision != "deny" || r.MCPName != "delete" || r.Rule != "no-delete" || r.JSONRPCID != fmt.Sprint(2*i+2) {
			t.Errorf("denial %d: %+v", i, r)
		}
	}
	// One record per request (its response's status and duration are in it).
	var got []string
	for len(got) < len(tools) {
		r := next(all)
		if r.Level != 2 || r.MCPMethod != "tools/call" || r.Direction != telemetry.ClientToServer {
			t.Errorf("kind=message passed %+v", r)
		}
		got = append(got, r.MCPName+":"+r.Decision)
	}
	if want := "[echo:allow delete:deny echo:allow delete:deny add:allow]"; fmt.Sprint(got) != want {
		t.Errorf("messages %v\nwant %s", got, want)
	}

	// History: a late subscriber with since gets the recent records replayed.
	late, closeLate := open("since=1h&tool=add&kind=message")
	defer closeLate()
	if r := next(late); r.MCPName != "add" || r.Direction != telemetry.ClientToServer {
		t.Errorf("replayed %+v", r)
	}

	// The page: the login sets the cookie and redirects; /ui and /ui/config with it.
	jar := &cookieJar{}
	browser := &http.Client{Jar: jar}
	if resp, err := browser.Get(adminURL + "/ui/login?token=" + url.QueryEscape("nope")); err != nil || resp.StatusCode != 401 {
		t.Fatalf("login with a wrong token: %v %v", resp, err)
	}
	resp, err := browser.Get(adminURL + "/ui/login?token=" + url.QueryEscape(token))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/ui" || !strings.Contains(string(page), "<table id=\"calls\">") {
		t.Fatalf("login: %d at %s, %d bytes", resp.StatusCode, resp.Request.URL, len(page))
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	for _, ext := range []string{"http://", "https://", "//cdn"} {
		if strings.Contains(string(page), ext) {
			t.Errorf("the page refers to %q (no external assets)", ext)
		}
	}
	resp, err = browser.Get(adminURL + "/ui/config")
	if err != nil {
		t.Fatal(err)
	}
	var uc admin.UIConfig
	json.NewDecoder(resp.Body).Decode(&uc)
	resp.Body.Close()
	if len(uc.Routes) != 1 || uc.Routes[0].Name != "pinned" || uc.Routes[0].RuleSet != "guard" ||
		len(uc.RuleSets["guard"]) != 1 || uc.RuleSets["guard"][0].Name != "no-delete" || !uc.ToolPins {
		t.Errorf("/ui/config %+v", uc)
	}

	// Stopping ends the streams with a reason.
	closeAll()
	closeLate()
	done := make(chan string, 1)
	go func() {
		for denials.Scan() {
			if strings.Contains(denials.Text(), `"observe":"end"`) {
				done <- denials.Text()
				return
			}
		}
		done <- ""
	}()
	stopped = true
	a.Stop(context.Background())
	if l := <-done; !strings.Contains(l, "appliance stopping") {
		t.Errorf("end line %q", l)
	}
}

// cookieJar is the one cookie the page's login sets, sent back on every request.
type cookieJar struct{ c []*http.Cookie }

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) { j.c = append(j.c, cs...) }
func (j *cookieJar) Cookies(*url.URL) []*http.Cookie          { return j.c }
