package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"mcpintercept/admin"
	"mcpintercept/integrity"
)

// fakeAdmin plays the appliance's admin listener: the snapshot and pin file it serves, the token
// approvals need, and the approvals it was asked for.
type fakeAdmin struct {
	mu       sync.Mutex
	snap     []integrity.ServerState
	pins     []byte
	token    string
	approved []admin.ToolApproval
}

func (f *fakeAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method + " " + r.URL.Path {
	case "GET /tools":
		json.NewEncoder(w).Encode(f.snap)
	case "GET /tools/pins":
		w.Write(f.pins)
	case "POST /tools/approve":
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			http.Error(w, "approving needs the admin token", http.StatusUnauthorized)
			return
		}
		var req admin.ToolApproval
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, s := range f.snap {
			for _, d := range s.Defs {
				if s.Server == req.Server && d.Kind == req.Kind && d.Name == req.Name {
					f.approved = append(f.approved, req)
					json.NewEncoder(w).Encode(admin.ToolEvent{Event: integrity.EventApproved, Server: s.Server, Kind: d.Kind, Name: d.Name, OldHash: d.Pin, NewHash: d.Seen})
					return
				}
			}
		}
		http.Error(w, "unknown definition "+req.Name, http.StatusNotFound)
	default:
		http.NotFound(w, r)
	}
}

const (
	hashA = "sha256:aaaaaaaaaaaa1111111111111111111111111111111111111111111111111111"
	hashB = "sha256:bbbbbbbbbbbb2222222222222222222222222222222222222222222222222222"
)

var testSnapshot = []integrity.ServerState{{
	Server: "10.200.2.2:3011/mcp",
	Defs: []integrity.DefState{
		{Kind: "tool", Name: "add", Pin: hashA, Source: "learned", Seen: hashA, State: "pinned"},
		{Kind: "tool", Name: "echo", Pin: hashA, Source: "learned", Seen: hashB, State: "changed", Changed: []string{"description"}, Findings: []string{"pattern:important", "zero_width"}},
		{Kind: "tool", Name: "sneaky\u200b\x1b[31m", Seen: hashB, State: "pending"},
		{Kind: "prompt", Name: "greet", Pin: hashA, Source: "file", Seen: hashA, State: "pinned"},
	},
}}

// TestToolsCommands: list, diff, approve and pin against a fake admin listener, and the
// connection derived from a configuration.
func TestToolsCommands(t *testing.T) {
	dir := t.TempDir()
	fa := &fakeAdmin{snap: testSnapshot, pins: []byte(`{"version":1,"servers":[]}`), token: strings.Repeat("c", 64)}
	srv := httptest.NewServer(fa)
	defer srv.Close()
	tokenFile := filepath.Join(dir, "admin.token")
	os.WriteFile(tokenFile, []byte(fa.token+"\n"), 0o600)
	wrongToken := filepath.Join(dir, "wrong.token")
	os.WriteFile(wrongToken, []byte(strings.Repeat("d", 64)), 0o600)
	conn := []string{"--admin", srv.URL, "--token-file", tokenFile}

	// A configuration naming the fake listener and a state directory holding the token.
	toolsDir := filepath.Join(dir, "state", "tools")
	os.MkdirAll(toolsDir, 0o700)
	os.WriteFile(filepath.Join(toolsDir, "admin.token"), []byte(fa.token), 0o600)
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := net.SplitHostPort(addr)
	cfgPath := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfgPath, []byte("mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [3011]}\n"+
		"admin: {listen: \"0.0.0.0:"+port+"\"}\ntool_integrity: {dir: state/tools}\n"), 0o644)
	offPath := filepath.Join(dir, "off.yaml")
	os.WriteFile(offPath, []byte("mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [3011]}\nadmin: {listen: \"off\"}\n"), 0o644)

	pinOut := filepath.Join(dir, "pins-out.json")
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   []string
		stderr   string
		approved string
	}{
		{name: "list", args: append([]string{"tools", "list"}, conn...), code: 0, stdout: []string{
			"SERVER               KIND    NAME",
			"10.200.2.2:3011/mcp  tool    echo",
			"aaaaaaaaaaaa  bbbbbbbbbbbb  pattern:important,zero_width",
			`"sneaky\u200b\x1b[31m"  pending  -`,
			"prompt  greet",
		}},
		{name: "list --json", args: append([]string{"tools", "list", "--json"}, conn...), code: 0, stdout: []string{`"server": "10.200.2.2:3011/mcp"`, `"changed": [`}},
		{name: "diff", args: append([]string{"tools", "diff"}, conn...), code: 1,
			stdout: []string{"STATE    CHANGED      PIN → SEEN", "echo", "changed  description  aaaaaaaaaaaa → bbbbbbbbbbbb", "pending  -            - → bbbbbbbbbbbb"},
			stderr: "2 definition(s) not pinned and unchanged"},
		{name: "approve", args: append([]string{"tools", "approve", "10.200.2.2:3011/mcp", "echo"}, conn...), code: 0,
			stdout: []string{"approved tool echo on 10.200.2.2:3011/mcp: pinned " + hashB + " (was " + hashA + ")"}, approved: "echo"},
		{name: "approve flags first, a prompt", args: append(append([]string{"tools", "approve"}, conn...), "--kind", "prompt", "10.200.2.2:3011/mcp", "greet"), code: 0,
			stdout: []string{"approved prompt greet"}, approved: "greet"},
		{name: "approve through --config", args: []string{"tools", "approve", "--config", cfgPath, "10.200.2.2:3011/mcp", "echo"}, code: 0,
			stdout: []string{"approved tool echo"}, approved: "echo"},
		{name: "approve wrong token", args: []string{"tools", "approve", "--admin", srv.URL, "--token-file", wrongToken, "10.200.2.2:3011/mcp", "echo"}, code: 1,
			stderr: "answered 401 Unauthorized: approving needs the admin token (the token in " + wrongToken + " is not the appliance's"},
		{name: "approve no token file", args: []string{"tools", "approve", "--admin", srv.URL, "--token-file", filepath.Join(dir, "none"), "s", "echo"}, code: 1,
			stderr: "cannot read the admin token"},
		{name: "approve unknown", args: append([]string{"tools", "approve", "10.200.2.2:3011/mcp", "nope"}, conn...), code: 1, stderr: "answered 404 Not Found: unknown definition nope"},
		{name: "approve one argument", args: append([]string{"tools", "approve", "echo"}, conn...), code: 2, stderr: "usage: mcpintercept tools approve SERVER NAME"},
		{name: "approve bad kind", args: append([]string{"tools", "approve", "s", "n", "--kind", "resource"}, conn...), code: 2, stderr: `--kind "resource": want tool, prompt or template`},
		{name: "pin to stdout", args: append([]string{"tools", "pin", "--from-live"}, conn...), code: 0, stdout: []string{`{"version":1,"servers":[]}` + "\n"}},
		{name: "pin --out", args: append([]string{"tools", "pin", "--from-live", "--out", pinOut}, conn...), code: 0, stderr: "wrote " + pinOut},
		{name: "pin without --from-live", args: append([]string{"tools", "pin"}, conn...), code: 2, stderr: "--from-live is required"},
		{name: "list through --config", args: []string{"tools", "list", "--config", cfgPath}, code: 0, stdout: []string{"echo"}},
		{name: "admin off", args: []string{"tools", "list", "--config", offPath}, code: 2, stderr: "admin.listen is off in " + offPath},
		{name: "bad --admin", args: []string{"tools", "list", "--admin", "ftp://x"}, code: 2, stderr: "want http://HOST:PORT"},
		{name: "unexpected argument", args: append([]string{"tools", "list", "extra"}, conn...), code: 2, stderr: `unexpected argument "extra"`},
		{name: "diff --pins missing file", args: append([]string{"tools", "diff", "--pins", filepath.Join(dir, "none.json")}, conn...), code: 2, stderr: "none.json"},
		{name: "help", args: []string{"tools", "help"}, code: 0, stdout: []string{"Exit 0: no difference; 1: differences"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fa.mu.Lock()
			fa.approved = nil
			fa.mu.Unlock()
			code, stdout, stderr := runCLI(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			if !strings.Contains(stderr, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, stderr)
			}
			fa.mu.Lock()
			defer fa.mu.Unlock()
			switch {
			case tc.approved == "" && len(fa.approved) > 0:
				t.Errorf("approved %+v", fa.approved)
			case tc.approved != "" && (len(fa.approved) != 1 || fa.approved[0].Name != tc.approved):
				t.Errorf("approved %+v, want %s", fa.approved, tc.approved)
			}
		})
	}
	b, err := os.ReadFile(pinOut)
	if fi, _ := os.Stat(pinOut); err != nil || string(b) != `{"version":1,"servers":[]}`+"\n" || fi.Mode().Perm() != 0o644 {
		t.Errorf("--out file: %q %v", b, err)
	}
	if strings.Contains(strings.Join(mustRead(t, dir), ""), ".tmp-") {
		t.Error("a temporary file was left beside --out")
	}

	// Nothing to show: exit 0.
	fa.mu.Lock()
	fa.snap = []integrity.ServerState{{Server: "s", Defs: []integrity.DefState{{Kind: "tool", Name: "add", Pin: hashA, Seen: hashA, State: "pinned"}}}}
	fa.mu.Unlock()
	if code, stdout, stderr := runCLI(append([]string{"tools", "diff"}, conn...)...); code != 0 || !strings.Contains(stdout, "no differences") {
		t.Errorf("diff with everything pinned: exit %d\n%s%s", code, stdout, stderr)
	}
}

func mustRead(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestToolsUnreachable: no listener at the admin URL is a runtime failure (exit 1) that says
// where it looked and what to check.
func TestToolsUnreachable(t *testing.T) {
	url := closedURL(t)
	for _, args := range [][]string{{"list"}, {"diff"}, {"approve", "s", "n", "--token-file", "/dev/null"}, {"pin", "--from-live"}} {
		code, _, stderr := runCLI(append(append([]string{"tools"}, args...), "--admin", url)...)
		if code != 1 || !strings.Contains(stderr, "cannot reach the appliance's admin listener at "+url+": ") ||
			!strings.Contains(stderr, "(is `mcpintercept run` running? admin.listen)") {
			t.Errorf("tools %v: exit %d\n%s", args, code, stderr)
		}
	}
}

// closedURL is an http URL on loopback where nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// pinFileWith is a pin file (as the appliance writes it) of a server listing tools, each a name
// and a description.
func pinFileWith(t *testing.T, tools ...[2]string) []byte {
	t.Helper()
	g, err := integrity.Open(integrity.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var defs []integrity.Def
	for _, tl := range tools {
		n, _ := json.Marshal(tl[0])
		d, _ := json.Marshal(tl[1])
		defs = append(defs, integrity.Def{Kind: integrity.KindTool, Name: tl[0], Raw: json.RawMessage(`{"name":` + string(n) + `,"description":` + string(d) + `}`)})
	}
	g.Route(integrity.RouteOptions{Mode: integrity.ModeLearn}).Observe(integrity.Server{Key: "10.200.2.2:3011/mcp"}, "v", defs, true)
	b, err := g.PinFile()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestToolsDiffPins: diff --pins compares the live pins with a pin file: exit 0 when they are
// the same, 1 with what differs.
func TestToolsDiffPins(t *testing.T) {
	dir := t.TempDir()
	live := pinFileWith(t, [2]string{"echo", "Echoes."}, [2]string{"add", "Adds."})
	fa := &fakeAdmin{pins: live}
	srv := httptest.NewServer(fa)
	defer srv.Close()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	same := write("same.json", pinFileWith(t, [2]string{"add", "Adds."}, [2]string{"echo", "Echoes."}))
	changed := write("changed.json", pinFileWith(t, [2]string{"echo", "Echoes. <IMPORTANT>"}, [2]string{"add", "Adds."}, [2]string{"gone", "Was here."}))
	junk := write("junk.json", []byte("{"))
	for _, tc := range []struct {
		name, file string
		code       int
		out        []string
	}{
		{"same", same, 0, []string{"the live definitions match " + same + " (2 definition(s))"}},
		{"changed", changed, 1, []string{"echo  differs", "gone  not seen live"}},
		{"junk", junk, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI("tools", "diff", "--pins", tc.file, "--admin", srv.URL)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.out {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			if strings.Contains(stdout, "add ") {
				t.Errorf("an unchanged definition is listed:\n%s", stdout)
			}
		})
	}
}
