//go:build linux

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Issue 16 end to end with the Go SDK v1.8 peers: every trick that makes a Level 2 intermediary
// and the peer behind it read different messages from the same bytes. The draft: a Level 2
// intermediary "MUST parse JSON-RPC message bodies" (Level 2 Requirements) and may "filter or
// block bidirectional messages (sampling, elicitation) per policy configuration"; what it forwards
// unparsed it has not judged. Each subtest first shows the trick working directly on the real Go
// SDK client or server (no appliance: the control), then runs it through the appliance with the
// lab's Level 2 rules (examples/lab.yaml, rule set lab-level2) and asserts the fixed behaviour.
//
// The hostile server (e2e/peers/hostile) plays the attacker: 10.200.2.2:3031 serves the scenarios
// by path, 3032 and 3033 write a whole response before any request (early-sampling,
// early-canary). The derived configuration puts 3031-3039 on the lab-level2 route.

const (
	hostileAddr       = "10.200.2.2:3031"
	hostileEarlySamp  = "10.200.2.2:3032"
	hostileEarlyCnry  = "10.200.2.2:3033"
	hostileUntrusted  = "lab-agent-untrusted"
	hostileClientWait = 60 * time.Second // hang guard of one client run
)

// hostileConfig is the lab configuration with 3031-3039 steered and on the lab-level2 route
// (plaintext, validate_arguments, the lab's Level 2 rules).
func hostileConfig(t *testing.T, caDir string) string {
	t.Helper()
	s := tlsConfig(t, caDir)
	for _, r := range [][2]string{
		{`"3000-3014"`, `"3000-3014", "3031-3039"`},
		{`match: {ports: ["3011-3014"]}`, `match: {ports: ["3011-3014", "3031-3039"]}`},
	} {
		if strings.Count(s, r[0]) != 1 {
			t.Fatalf("lab.yaml changed: %q occurs %d times", r[0], strings.Count(s, r[0]))
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

// hostileCanary is a fresh secret in the lab's redaction pattern (CANARY-[0-9A-Za-z]+).
func hostileCanary() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "CANARY-" + hex.EncodeToString(b)
}

// hostileServer starts the hostile peer in mcpi-server for this test.
func hostileServer(t *testing.T, canary string) *proc {
	t.Helper()
	p := startT(t, nsServer, bin("hostile"), "-canary", canary,
		"-listen", hostileAddr+","+hostileEarlySamp+"=early-sampling,"+hostileEarlyCnry+"=early-canary")
	if err := p.waitFor("READY "+hostileEarlyCnry, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// hostileOut is mcpclient -tool's output, plus everything it printed.
type hostileOut struct {
	Tools          []string `json:"tools"`
	ListError      string   `json:"list_error"`
	Tool           string   `json:"tool"`
	IsError        bool     `json:"is_error"`
	Text           string   `json:"text"`
	TransportError string   `json:"transport_error"`
	Error          *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
	Served *struct {
		Sampling int `json:"sampling"`
	} `json:"served"`
	raw string
}

func (o hostileOut) sampled() int {
	if o.Served == nil {
		return 0
	}
	return o.Served.Sampling
}

// hostileClient runs the Go SDK client (e2e/peers/mcpclient) in mcpi-client on 2025-11-25 (the
// initialize handshake: the appliance learns clientInfo from it) with the given arguments. A
// client that printed no report (it could not connect) is returned with its stderr in raw.
func hostileClient(t *testing.T, args ...string) hostileOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), hostileClientWait+30*time.Second)
	defer cancel()
	args = append([]string{"-protocol-version", "2025-11-25", "-timeout", hostileClientWait.String()}, args...)
	out, errOut, _ := run(ctx, nsClient, bin("mcpclient"), args...)
	o := hostileOut{raw: strings.TrimSpace(out + "\n" + errOut)}
	if line := strings.TrimSpace(out); line != "" {
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("mcpclient %s: output %q: %v", strings.Join(args, " "), out, err)
		}
		o.raw = strings.TrimSpace(out + "\n" + errOut)
	}
	// Every outcome is logged: the test records how each case behaves, not only whether it passed.
	t.Logf("mcpclient %s\n    -> %s", strings.Join(args[4:], " "), o.raw)
	return o
}

// hostileSampling runs the untrusted client answering sampling against url and calls echo.
func hostileSampling(t *testing.T, url string, extra ...string) hostileOut {
	t.Helper()
	return hostileClient(t, append([]string{"-url", url, "-name", hostileUntrusted, "-answer", "-tool", "echo", "-args", `{"text":"x"}`}, extra...)...)
}

// hostileResponse is one raw HTTP exchange as the client namespace sees it.
type hostileResponse struct {
	status int
	header http.Header
	body   string
}

func (r hostileResponse) String() string {
	return fmt.Sprintf("%d %q %q", r.status, r.header.Get("Content-Type"), r.body)
}

// hostileExchange sends one raw request on a fresh connection from mcpi-client.
func hostileExchange(t *testing.T, addr, method, path string, headers []string, body string) hostileResponse {
	t.Helper()
	c := dialInNS(t, nsClient, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(hostileClientWait)) // hang guard
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", method, path, addr)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatalf("write to %s: %v", addr, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Logf("raw %s %s%s %s\n    -> no response: %v", method, addr, path, body, err)
		return hostileResponse{header: http.Header{}, body: "no response: " + err.Error()}
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		got = append(got, " (read: "+err.Error()+")"...)
	}
	r := hostileResponse{status: resp.StatusCode, header: resp.Header, body: string(got)}
	t.Logf("raw %s %s%s %s\n    -> %s", method, addr, path, body, r)
	return r
}

// hostileRawSession initializes a 2025-11-25 session by hand as the untrusted client and returns
// the headers its later requests carry.
func hostileRawSession(t *testing.T, addr, path string) []string {
	t.Helper()
	r := hostileExchange(t, addr, "POST", path, nil,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"`+hostileUntrusted+`","version":"1.0.0"}}}`)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != 200 || sid == "" {
		t.Fatalf("raw initialize on %s%s: %s", addr, path, r)
	}
	h := []string{"Mcp-Session-Id: " + sid, "MCP-Protocol-Version: 2025-11-25"}
	if r := hostileExchange(t, addr, "POST", path, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.status != 202 {
		t.Fatalf("raw notifications/initialized on %s%s: %s", addr, path, r)
	}
	return h
}

// hostileEarlyExchange calls echo on the early-canary listener with a raw client that sends its
// request head, waits until the hostile server wrote its early bytes (or a hang guard passed:
// an appliance that dials upstream only once it has the whole request never lets it happen),
// then sends the body and reads the answer.
func hostileEarlyExchange(t *testing.T, h *proc) hostileResponse {
	t.Helper()
	hs := hostileRawSession(t, hostileEarlyCnry, "/plain")
	body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
	before := strings.Count(h.stderr.String(), "EARLY ")
	c := dialInNS(t, nsClient, hostileEarlyCnry)
	defer c.Close()
	c.SetDeadline(time.Now().Add(hostileClientWait)) // hang guard
	fmt.Fprintf(c, "POST /plain HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n%s\r\nContent-Length: %d\r\n\r\n",
		hostileEarlyCnry, strings.Join(hs, "\r\n"), len(body))
	for guard := time.Now().Add(10 * time.Second); strings.Count(h.stderr.String(), "EARLY ") == before && time.Now().Before(guard); {
		time.Sleep(10 * time.Millisecond)
	}
	early := strings.Count(h.stderr.String(), "EARLY ") > before
	io.WriteString(c, body)
	r := hostileResponse{header: http.Header{}}
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		r.body = "no response: " + err.Error()
	} else {
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		r = hostileResponse{status: resp.StatusCode, header: resp.Header, body: string(got)}
	}
	t.Logf("raw early exchange (early bytes before the body: %v)\n    -> %s", early, r)
	return r
}

// hostileThrough starts this subtest's appliance with cfg (the log says where the direct runs end).
func hostileThrough(t *testing.T, cfg string) *appliance {
	t.Helper()
	a := startAppliance(t, "nftables-tproxy", cfg)
	t.Log("=== through the appliance from here on")
	return a
}

// hostileRunning reports whether the appliance process is still alive.
func hostileRunning(a *appliance) bool {
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

func hostilePort(r flowRecord) string { return r.OrigDst[strings.LastIndex(r.OrigDst, ":")+1:] }

// TestDifferentialGo: issue 16 cases 1, 2, 3, 4, 6 and 14 with the Go SDK v1.8 client and server.
// Each subtest runs its control directly, then starts its own appliance (so that one case's
// failure, a crash included, cannot hide or cause another's) and reads that appliance's records.
func TestDifferentialGo(t *testing.T) {
	needLab(t)
	canary := hostileCanary()
	h := hostileServer(t, canary)
	statelessServer(t)
	cfg := hostileConfig(t, t.TempDir())
	base := "http://" + hostileAddr

	// Case 1: "a POST answered with Content-Type: application/json whose body is a
	// sampling/createMessage request (alone or in a batch): the record says deny, yet the message is
	// forwarded and the Go SDK client's sampling handler runs".
	t.Run("1 server request in a JSON body", func(t *testing.T) {
		if o := hostileSampling(t, base+"/json-sampling"); o.sampled() != 1 {
			t.Fatalf("control: the Go SDK client did not run its sampling handler for a request in a JSON body:\n%s", o.raw)
		}
		// The Go SDK v1.8 client decodes no batch (jsonrpc.DecodeMessage takes one message): the
		// batch is checked by its bytes, as a client that reads batches (the TypeScript SDK) would.
		hs := hostileRawSession(t, hostileAddr, "/json-batch")
		if r := hostileExchange(t, hostileAddr, "POST", "/json-batch", hs, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`); !strings.Contains(r.body, "sampling/createMessage") {
			t.Fatalf("control: the batch carries no sampling request: %s", r)
		}

		a := hostileThrough(t, cfg)
		if o := hostileSampling(t, base+"/json-sampling"); o.sampled() != 0 {
			t.Errorf("through Level 2 the untrusted client's sampling handler ran %d times for a request in a JSON body (rule no-sampling-for-untrusted):\n%s", o.sampled(), o.raw)
		}
		hs = hostileRawSession(t, hostileAddr, "/json-batch")
		r := hostileExchange(t, hostileAddr, "POST", "/json-batch", hs, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
		if strings.Contains(r.body, "sampling/createMessage") {
			t.Errorf("through Level 2 a denied sampling request in a JSON batch reached the client: %s", r)
		}
		recs := a.stopGracefully(t)
		denied := 0
		for _, rec := range recs {
			if hostilePort(rec) == "3031" && rec.MCPMethod == "sampling/createMessage" && rec.Decision == "deny" {
				denied++
			}
		}
		if denied < 2 {
			t.Errorf("flow log: %d deny records for sampling/createMessage on 3031, want one per request (2)", denied)
		}
	})

	// Case 2: "a server that writes a whole HTTP response as soon as the connection opens (before
	// the client's body has arrived)": net/http takes it as the answer to its POST. Two ways: the
	// Go SDK client (whose body follows its head at once, so through the appliance the bytes may
	// meet a request already forwarded: then they are that request's answer and must be judged as
	// one), and a raw client that holds its body back until the server has written (the hostile
	// server logs EARLY), so that the bytes certainly come while no request is outstanding.
	t.Run("2 bytes while no request is outstanding", func(t *testing.T) {
		// The controls race net/http (the early bytes against the client's request being
		// registered as outstanding; on a loaded machine they can come first and be dropped as
		// "unsolicited"): they show the bytes can reach the client, so one success of a few tries
		// is the control.
		var o hostileOut
		for range 5 {
			if o = hostileSampling(t, "http://"+hostileEarlySamp+"/plain"); o.sampled() == 1 {
				break
			}
		}
		if o.sampled() != 1 {
			t.Fatalf("control: early bytes carrying a sampling request did not reach the handler in 5 tries:\n%s", o.raw)
		}
		for range 5 {
			if o = hostileClient(t, "-url", "http://"+hostileEarlyCnry+"/plain", "-tool", "echo", "-args", `{"text":"x"}`); strings.Contains(o.Text, canary) {
				break
			}
		}
		if !strings.Contains(o.Text, canary) {
			t.Fatalf("control: early bytes carrying the canary did not become the call's result in 5 tries:\n%s", o.raw)
		}
		if r := hostileEarlyExchange(t, h); !strings.Contains(r.body, canary) {
			t.Fatalf("control: the raw client did not get the early bytes as its answer: %s", r)
		}

		a := hostileThrough(t, cfg)
		before := strings.Count(h.stderr.String(), "EARLY ")
		samp := hostileSampling(t, "http://"+hostileEarlySamp+"/plain")
		leak := hostileClient(t, "-url", "http://"+hostileEarlyCnry+"/plain", "-tool", "echo", "-args", `{"text":"x"}`)
		raw := hostileEarlyExchange(t, h)
		if n := strings.Count(h.stderr.String(), "EARLY "); n != before+3 {
			t.Fatalf("the hostile server wrote early bytes %d times through the appliance, want 3:\n%s", n-before, h.stderr)
		}
		if samp.sampled() != 0 {
			t.Errorf("through Level 2 early bytes (a sampling request) reached the untrusted client's handler:\n%s", samp.raw)
		}
		if strings.Contains(leak.raw, canary) {
			t.Errorf("through Level 2 early bytes carried the canary to the Go SDK client unredacted:\n%s", leak.raw)
		}
		if strings.Contains(raw.body, canary) {
			t.Errorf("through Level 2 bytes sent while no request was outstanding reached the raw client unjudged: %s", raw)
		}
		a.stopGracefully(t)
		if log := a.stdout.String() + a.stderr.String(); !strings.Contains(log, "no request outstanding") {
			t.Errorf("the appliance did not log the bytes that came with no request outstanding:\n%s", a.stderr)
		}
	})

	// Case 3: "data: \v{…}, data: \f{…}, data: \u00a0{…}, data:\r{…}: not recognised as JSON,
	// forwarded unjudged; the Go SDK client trims with bytes.TrimSpace and dispatches them".
	wss := []string{"vt", "ff", "nbsp", "cr"}
	t.Run("3 SSE values the Go client trims", func(t *testing.T) {
		for _, ws := range wss {
			if o := hostileSampling(t, base+"/sse/"+ws+"/sampling"); o.sampled() != 1 {
				t.Fatalf("control %s: the sampling request behind the whitespace did not reach the handler:\n%s", ws, o.raw)
			}
			if o := hostileClient(t, "-url", base+"/sse/"+ws+"/canary", "-tool", "echo", "-args", `{"text":"x"}`); !strings.Contains(o.Text, canary) {
				t.Fatalf("control %s: the result behind the whitespace did not reach the client:\n%s", ws, o.raw)
			}
		}
		a := hostileThrough(t, cfg)
		for _, ws := range wss {
			if o := hostileSampling(t, base+"/sse/"+ws+"/sampling"); o.sampled() != 0 {
				t.Errorf("through Level 2 (%s) the sampling request behind the whitespace reached the untrusted client's handler:\n%s", ws, o.raw)
			}
			if o := hostileClient(t, "-url", base+"/sse/"+ws+"/canary", "-tool", "echo", "-args", `{"text":"x"}`); strings.Contains(o.raw, canary) {
				t.Errorf("through Level 2 (%s) the canary behind the whitespace reached the client:\n%s", ws, o.raw)
			}
		}
		a.stopGracefully(t)
	})

	// Case 4: "a second endpoint event on a 2024-11-05 stream carrying a sampling request: never
	// judged; the Go SDK legacy SSE client decodes every event's data".
	t.Run("4 second endpoint event", func(t *testing.T) {
		if o := hostileSampling(t, base+"/legacy/sampling", "-sse"); o.sampled() != 1 {
			t.Fatalf("control: the legacy client did not run its handler for a request in an endpoint event:\n%s", o.raw)
		}
		if o := hostileClient(t, "-sse", "-url", base+"/legacy/canary", "-tool", "echo", "-args", `{"text":"x"}`); !strings.Contains(o.Text, canary) {
			t.Fatalf("control: the legacy client did not take a result in an endpoint event:\n%s", o.raw)
		}
		a := hostileThrough(t, cfg)
		if o := hostileSampling(t, base+"/legacy/sampling", "-sse"); o.sampled() != 0 {
			t.Errorf("through Level 2 a sampling request in a second endpoint event reached the untrusted legacy client's handler:\n%s", o.raw)
		}
		if o := hostileClient(t, "-sse", "-url", base+"/legacy/canary", "-tool", "echo", "-args", `{"text":"x"}`); strings.Contains(o.raw, canary) {
			t.Errorf("through Level 2 a result in a second endpoint event carried the canary to the legacy client:\n%s", o.raw)
		}
		a.stopGracefully(t)
	})

	// Case 6: "request id 1.0 (the Go SDK server answers 1), or a server answering id 1 with 1.0:
	// the response no longer correlates, so response rules (redaction, list filtering) are
	// skipped".
	t.Run("6 re-spelled numeric ids", func(t *testing.T) {
		respell := func() hostileOut {
			return hostileClient(t, "-url", base+"/respell", "-list", "-tool", "echo", "-args", `{"text":"x"}`)
		}
		if o := respell(); !slices.Contains(o.Tools, "denied_delete") || !strings.Contains(o.Text, canary) {
			t.Fatalf("control (a): the Go SDK client did not take the answers with re-spelled ids (list %v, text %q):\n%s", o.Tools, o.Text, o.raw)
		}
		const addr = "10.200.2.2:3012"
		hdr := func(method string) []string {
			return []string{"MCP-Protocol-Version: 2026-07-28", "Mcp-Method: " + method}
		}
		list := `{"jsonrpc":"2.0","id":1.0,"method":"tools/list","params":{` + meta2026 + `}}`
		call := `{"jsonrpc":"2.0","id":2.0,"method":"tools/call","params":{"name":"echo","arguments":{"text":"the key is ` + canary + `"},` + meta2026 + `}}`
		callHdr := append(hdr("tools/call"), "Mcp-Name: echo")
		if r := hostileExchange(t, addr, "POST", "/mcp", hdr("tools/list"), list); r.status != 200 || !strings.Contains(r.body, `"id":1`) || !strings.Contains(r.body, "denied_delete") {
			t.Fatalf("control (b): the Go SDK server's answer to tools/list with id 1.0: %s", r)
		}
		if r := hostileExchange(t, addr, "POST", "/mcp", callHdr, call); r.status != 200 || !strings.Contains(r.body, canary) {
			t.Fatalf("control (b): the Go SDK server's echo with id 2.0: %s", r)
		}

		a := hostileThrough(t, cfg)
		if o := respell(); slices.Contains(o.Tools, "denied_delete") || strings.Contains(o.raw, canary) {
			t.Errorf("through Level 2 (a) answers with re-spelled ids escaped the response rules (list %v, text %q):\n%s", o.Tools, o.Text, o.raw)
		}
		if r := hostileExchange(t, addr, "POST", "/mcp", hdr("tools/list"), list); strings.Contains(r.body, "denied_delete") {
			t.Errorf("through Level 2 (b) tools/list with id 1.0 listed denied_delete: %s", r)
		}
		if r := hostileExchange(t, addr, "POST", "/mcp", callHdr, call); strings.Contains(r.body, canary) {
			t.Errorf("through Level 2 (b) echo with id 2.0 carried the canary back: %s", r)
		}
		recs := a.stopGracefully(t)
		var stray, filtered, redacted int
		for _, rec := range recs {
			if hostilePort(rec) != "3012" {
				continue
			}
			switch {
			case rec.Direction == "server_to_client" && rec.MCPMethod == "":
				stray++ // a response recorded on its own: it did not correlate with its request
			case rec.MCPMethod == "tools/list" && strings.Contains(rec.Reason, "hid") && strings.Contains(rec.Reason, "denied_delete"):
				filtered++
			case rec.MCPMethod == "tools/call" && (rec.Rule == "redact-canary" || strings.Contains(rec.Reason, "redact-canary")):
				redacted++
			}
		}
		if stray != 0 || filtered != 1 || redacted != 1 {
			t.Errorf("flow log (b) on 3012: %d uncorrelated responses (want 0), %d filtered tools/list (want 1), %d redacted tools/call (want 1)", stray, filtered, redacted)
		}
	})

	// Case 14: "a server that answers a POST 202 Accepted with Content-Type: application/json and
	// an empty (chunked) body gets its body replaced by a -31003 error: an empty body carries no
	// message and must pass unchanged".
	t.Run("14 empty answer", func(t *testing.T) {
		type post struct{ path, body string }
		posts := []post{
			{"/empty/202", `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
			{"/empty/202", `{"jsonrpc":"2.0","id":1,"method":"ping"}`},
			{"/empty/200", `{"jsonrpc":"2.0","method":"notifications/initialized"}`},
			{"/empty/200", `{"jsonrpc":"2.0","id":1,"method":"ping"}`},
		}
		direct := make([]hostileResponse, len(posts))
		for i, p := range posts {
			direct[i] = hostileExchange(t, hostileAddr, "POST", p.path, nil, p.body)
			if direct[i].body != "" || direct[i].status == 0 {
				t.Fatalf("control %s %s: %s, want an empty answer", p.path, p.body, direct[i])
			}
		}
		a := hostileThrough(t, cfg)
		for i, p := range posts {
			r := hostileExchange(t, hostileAddr, "POST", p.path, nil, p.body)
			if r.status != direct[i].status || r.body != direct[i].body || r.header.Get("Content-Type") != direct[i].header.Get("Content-Type") {
				t.Errorf("through Level 2 %s %s: %s, want as directly %s", p.path, p.body, r, direct[i])
			}
		}
		a.stopGracefully(t)
	})
}

// TestDifferentialGoSchema: issue 16 case 7. "tools/list advertising
// {"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}, then tools/call of that tool with
// validate_arguments: fatal error: stack overflow — the whole appliance dies"; "nested anyOf
// schemas cost exponential time". Fixed: the calls get -32602 naming the appliance, the appliance
// lives, and another client (the real Go SDK server on 3011) is served while and after they run.
func TestDifferentialGoSchema(t *testing.T) {
	needLab(t)
	hostileServer(t, hostileCanary())
	goServer(t)
	cfg := hostileConfig(t, t.TempDir())
	tools := []string{"anyof19", "recursive"} // the recursive one last: today it kills the appliance
	for _, tool := range tools {
		if o := hostileClient(t, "-url", "http://"+hostileAddr+"/schema", "-list", "-tool", tool); o.Text != "hostile ran "+tool {
			t.Fatalf("control: %s directly: %s", tool, o.raw)
		}
	}
	other := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), hostileClientWait)
		defer cancel()
		out, errOut, err := run(ctx, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:3011/mcp")
		if err != nil || !strings.Contains(out, `"echo"`) {
			return fmt.Errorf("%v\n%s%s", err, out, errOut)
		}
		return nil
	}

	a := hostileThrough(t, cfg)
	for _, tool := range tools {
		// Another client is served while the hostile schema is in use (started together; the
		// assertion is that it was served, not how fast).
		served := make(chan error, 1)
		go func() { served <- other() }()
		o := hostileClient(t, "-url", "http://"+hostileAddr+"/schema", "-list", "-tool", tool)
		if o.Error == nil || o.Error.Code != -32602 || !strings.Contains(string(o.Error.Data)+o.Error.Message, "mcpintercept") {
			t.Errorf("through Level 2 the call of %s (hostile schema): want JSON-RPC -32602 naming mcpintercept:\n%s", tool, o.raw)
		}
		if err := <-served; err != nil {
			t.Errorf("another client was not served while %s was called: %v", tool, err)
		}
		if !hostileRunning(a) {
			t.Fatalf("the appliance died on the call of %s (hostile schema):\n%s", tool, hostileTail(a.stderr.String(), 20))
		}
		if err := other(); err != nil {
			t.Errorf("another client was not served after %s was called: %v", tool, err)
		}
		// Bounded cost without a clock: the appliance's peak memory (VmHWM) after the call. An
		// unbounded validator spends about 1.3 GB on anyOf 19 deep (issue 16).
		if kb := hostilePeakKB(t, a); kb > 256<<10 {
			t.Errorf("after the call of %s the appliance's peak memory is %d MiB, want a bounded validation (< 256 MiB)", tool, kb>>10)
		} else {
			t.Logf("appliance peak memory after %s: %d MiB", tool, kb>>10)
		}
	}
	a.stopGracefully(t)
}

// hostilePeakKB is the appliance process's peak resident memory (VmHWM) in KiB.
func hostilePeakKB(t *testing.T, a *appliance) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("appliance status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kb int
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", a.cmd.Process.Pid)
	return 0
}

// hostileTail is the end of a long log.
func hostileTail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
