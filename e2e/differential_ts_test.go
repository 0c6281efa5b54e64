//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Differential tests against the TypeScript SDK (issue 16): the SDK itself says what it accepts
// and acts on (a control run with no appliance in the path), and the same bytes through Level 2
// must then be judged or refused. DESIGN.md: "Level 2 *detects* leniently: whatever any supported
// peer (Go SDK, TypeScript SDK, Python's json) would decode and act on is judged or refused ...
// Prove it with differential tests that run the peer's own decoder over the same input." The
// draft's Level 2 "MUST parse JSON-RPC message bodies" (Level 2 Requirements): a body the server
// parses and the intermediary does not is a message nobody judged.

const (
	tsServerAddr = "10.200.2.2:3041" // e2e/node/ts-server.mjs (case 5)
)

// tsConfig is the lab configuration with ports 3041-3049 steered and on the plaintext Level 2
// route (rule set lab-level2), and the lab's tools/call rate limit lifted: the differentials send
// hundreds of calls in a few seconds, and a rate_limited refusal would hide which rule judged them.
func tsConfig(t *testing.T) string {
	t.Helper()
	s := tlsConfig(t, filepath.Join(t.TempDir(), "ca"))
	for _, r := range [][2]string{
		{`"3000-3014"`, `"3000-3014", "3041-3049"`},
		{`match: {ports: ["3011-3014"]}`, `match: {ports: ["3011-3014", "3041-3049"]}`},
		{`rate_limit: {key: 'prefix(client.address, 32, 64)', rate: 50, burst: 200}`,
			`rate_limit: {key: 'prefix(client.address, 32, 64)', rate: 100000, burst: 100000}`},
	} {
		if strings.Count(s, r[0]) != 1 {
			t.Fatalf("lab.yaml changed: %q occurs %d times", r[0], strings.Count(s, r[0]))
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

// tsNode starts an e2e/node script in a lab namespace for the test and waits for its READY line.
func tsNode(t *testing.T, ns, script string, args ...string) *proc {
	t.Helper()
	p := startT(t, ns, "node", append([]string{filepath.Join(repoRoot, "e2e", "node", script)}, args...)...)
	if err := p.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// tsReply is one HTTP answer to a raw request: status 0 when the connection ended without one.
type tsReply struct {
	status int
	body   []byte
}

// tsRaw sends one raw HTTP/1.1 request from mcpi-client on a fresh connection and reads the answer.
func tsRaw(t *testing.T, addr string, req []byte) tsReply {
	t.Helper()
	c := dialInNS(t, nsClient, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard, not a timing assertion
	if _, err := c.Write(req); err != nil {
		return tsReply{}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return tsReply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return tsReply{status: resp.StatusCode, body: b}
}

// tsPost is a POST /mcp with the given raw Content-Type header lines (each without CRLF; none:
// no Content-Type at all) and body, accepting both JSON and SSE as the TS server requires.
func tsPost(addr string, contentTypes []string, body []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST /mcp HTTP/1.1\r\nHost: %s\r\nAccept: application/json, text/event-stream\r\n", addr)
	for _, ct := range contentTypes {
		b.WriteString("Content-Type: " + ct + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}

// tsDeleteCall is the tools/call of denied_delete with id, after prefix (a BOM, spaces).
func tsDeleteCall(prefix string, id int) []byte {
	return []byte(fmt.Sprintf(`%s{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"denied_delete","arguments":{}}}`, prefix, id))
}

// tsRan reports whether the TS server ran denied_delete for request id (its TOOLRUN line). Call
// it after tsMark: the log is only complete up to a marker.
func tsRan(srv *proc, id int) bool {
	return strings.Contains(srv.stderr.String(), fmt.Sprintf("TOOLRUN denied_delete id=%d\n", id))
}

// tsMark asks the TS server (from its own namespace, never steered) to log a marker and waits
// for it: every request it answered before is then in its log, the tool runs included.
func tsMark(t *testing.T, srv *proc, addr string) {
	t.Helper()
	tsMarks++
	m := fmt.Sprintf("m%d", tsMarks)
	c := dialInNS(t, nsServer, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang guard
	fmt.Fprintf(c, "GET /mark?%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", m, addr)
	io.Copy(io.Discard, c)
	if err := srv.waitFor("MARK "+m+"\n", 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

var tsMarks int

// tsRPC is the part of a JSON-RPC answer the tests read.
type tsRPC struct {
	ID     json.RawMessage `json:"id"`
	Result *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
	Error *struct {
		Code int `json:"code"`
		Data struct {
			Intermediary string `json:"intermediary"`
			Rule         string `json:"rule"`
		} `json:"data"`
	} `json:"error"`
}

// tsAnswer decodes a JSON (or single-event SSE) answer; the zero value when it is neither.
func tsAnswer(body []byte) tsRPC {
	var r tsRPC
	if json.Unmarshal(body, &r) == nil {
		return r
	}
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), "data:"); ok && json.Unmarshal([]byte(v), &r) == nil {
			return r
		}
	}
	return tsRPC{}
}

// tsSpelling is one way of writing a request's Content-Type and body prefix.
type tsSpelling struct {
	name         string
	contentTypes []string // header values as raw bytes; nil: no Content-Type header
	prefix       string   // bytes before the JSON body
}

// tsUnicodeSpaces are the code points JavaScript's String.prototype.trim removes (WhiteSpace and
// LineTerminator of ECMA-262) and a few it does not (U+0085, U+180E, U+200B): candidates, not a
// verdict; the server says which count.
var tsUnicodeSpaces = []rune{
	0x09, 0x0b, 0x0c, 0x20, 0x85, 0xa0, 0x1680, 0x180e, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005,
	0x2006, 0x2007, 0x2008, 0x2009, 0x200a, 0x200b, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000, 0xfeff,
}

// tsContentTypeCandidates are the Content-Type spellings the case 5 differential asks the TS
// server about: every byte (but CR, LF) before and after the media type, the Unicode spaces in
// UTF-8 at both ends, case, parameters, near-miss subtypes, missing and repeated headers. The
// body is the issue's: a BOM, then the call.
func tsContentTypeCandidates() []tsSpelling {
	const bom = "\ufeff"
	var out []tsSpelling
	add := func(name string, prefix string, cts ...string) {
		out = append(out, tsSpelling{name: name, contentTypes: cts, prefix: prefix})
	}
	for b := 0; b < 256; b++ {
		if b == '\r' || b == '\n' {
			continue
		}
		add(fmt.Sprintf("byte %#02x before", b), bom, string([]byte{byte(b)})+"application/json")
		add(fmt.Sprintf("byte %#02x after", b), bom, "application/json"+string([]byte{byte(b)}))
		add(fmt.Sprintf("byte %#02x before ;", b), bom, "application/json"+string([]byte{byte(b)})+";charset=utf-8")
	}
	for _, r := range tsUnicodeSpaces {
		add(fmt.Sprintf("U+%04X (UTF-8) before", r), bom, string(r)+"application/json")
		add(fmt.Sprintf("U+%04X (UTF-8) after", r), bom, "application/json"+string(r))
	}
	for _, ct := range []string{
		"application/json", "APPLICATION/JSON", "Application/Json", "application/JSON",
		"application/json;charset=utf-8", "application/json; charset=UTF-8", `application/json; charset="utf-8"`,
		"application/json;", "application/json; charset=", "application/json;;", "application/json; x",
		"application/json ; charset=utf-8", "application/json;charset=utf-16", "application/json;charset=latin1",
		"application/json, text/plain", "text/plain, application/json", "application/json,application/json",
		"application/json-rpc", "application/jsonrequest", "application/x-json", "text/json", "text/plain",
		"application/vnd.api+json", "application/json+rpc", "application/*", "*/*", "",
		"\xa0\xa0application/json\xa0", "\t application/json \t", "\vapplication/json", "\xa0APPLICATION/JSON\xa0;\xa0charset=utf-8",
	} {
		add(fmt.Sprintf("%q", ct), bom, ct)
	}
	add("no Content-Type", bom)
	add("two headers: \\xa0application/json, text/plain", bom, "\xa0application/json", "text/plain")
	add("two headers: text/plain, \\xa0application/json", bom, "text/plain", "\xa0application/json")
	add("two headers: application/json, text/plain", bom, "application/json", "text/plain")
	return out
}

// tsBodyPrefixCandidates are the bytes before the JSON body the differential asks the TS server
// about, with a plain Content-Type: the Unicode spaces, one or two BOMs, and mixes.
func tsBodyPrefixCandidates() []tsSpelling {
	var out []tsSpelling
	add := func(name, prefix string) {
		out = append(out, tsSpelling{name: name, contentTypes: []string{"application/json"}, prefix: prefix})
	}
	for _, r := range tsUnicodeSpaces {
		add(fmt.Sprintf("body after U+%04X", r), string(r))
		add(fmt.Sprintf("body after BOM U+%04X", r), "\ufeff"+string(r))
	}
	for _, p := range []string{"\ufeff", "\ufeff\ufeff", "\r\n\ufeff", "\x00", "\ufeff \r\n\t", "\xef\xbb", "\xfe\xff", "\xff\xfe"} {
		add(fmt.Sprintf("body after %q", p), p)
	}
	return out
}

var tsIntermediary = regexp.MustCompile(`"intermediary"\s*:\s*"mcpintercept"`)

// TestDifferentialTSContentType is issue 16 case 5: a Content-Type the TypeScript SDK server
// trims (NBSP before the type) and a UTF-8 BOM before a tools/call of denied_delete. Control: the
// spellings the real TS server accepts and runs the tool for (derived by asking it, not from a
// list). Through Level 2 every one of them is refused with a JSON-RPC error naming mcpintercept
// and the tool never runs.
func TestDifferentialTSContentType(t *testing.T) {
	needLab(t)
	srv := tsNode(t, nsServer, "ts-server.mjs", tsServerAddr)

	type candidate struct {
		tsSpelling
		id int
	}
	var all []candidate
	for i, s := range append(tsContentTypeCandidates(), tsBodyPrefixCandidates()...) {
		all = append(all, candidate{s, 1000 + i})
	}

	// Control: which spellings does the TS SDK server act on?
	answers := make([]tsReply, len(all))
	for i, c := range all {
		answers[i] = tsRaw(t, tsServerAddr, tsPost(tsServerAddr, c.contentTypes, tsDeleteCall(c.prefix, c.id)))
	}
	tsMark(t, srv, tsServerAddr)
	var accepted []candidate
	for i, c := range all {
		r := answers[i]
		ran := tsRan(srv, c.id)
		if ran != (tsAnswer(r.body).Result != nil) {
			t.Fatalf("control %s: the tool ran=%v but the answer was %d %q", c.name, ran, r.status, r.body)
		}
		if ran {
			accepted = append(accepted, candidate{c.tsSpelling, c.id + 100000})
		}
	}
	var names []string
	for _, c := range accepted {
		names = append(names, c.name)
	}
	t.Logf("the TS SDK server runs denied_delete for %d of %d spellings: %s", len(accepted), len(all), strings.Join(names, "; "))
	for _, want := range []string{"byte 0xa0 before", "body after U+FEFF"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Fatalf("control: the TS server did not accept %q (the trick of case 5 no longer works on this SDK)", want)
		}
	}

	a := startAppliance(t, "nftables-tproxy", tsConfig(t))
	answers = make([]tsReply, len(accepted))
	for i, c := range accepted {
		answers[i] = tsRaw(t, tsServerAddr, tsPost(tsServerAddr, c.contentTypes, tsDeleteCall(c.prefix, c.id)))
	}
	tsMark(t, srv, tsServerAddr)
	var bypass []string
	for i, c := range accepted {
		r := answers[i]
		ans := tsAnswer(r.body)
		switch {
		case tsRan(srv, c.id):
			bypass = append(bypass, fmt.Sprintf("%s: the tool ran (answer %d %q)", c.name, r.status, r.body))
		case ans.Error == nil || !tsIntermediary.Match(r.body):
			bypass = append(bypass, fmt.Sprintf("%s: refused without a JSON-RPC error naming mcpintercept (%d %q)", c.name, r.status, r.body))
		}
	}
	if len(bypass) > 0 {
		t.Errorf("through Level 2, %d of the %d spellings the TS server acts on were not refused with a JSON-RPC error naming mcpintercept:\n%s",
			len(bypass), len(accepted), strings.Join(bypass, "\n"))
	}
	a.stopGracefully(t)
}

// tsLegacySampling runs e2e/node/legacy-sampling-client.mjs (the TS SDK client over the
// 2024-11-05 HTTP+SSE transport, sampling capability) in mcpi-client as name and calls tool.
func tsLegacySampling(t *testing.T, url, name, tool, args string) (samplingRun, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second) // a hang guard
	defer cancel()
	out, errOut, err := run(ctx, nsClient, "node", filepath.Join(repoRoot, "e2e", "node", "legacy-sampling-client.mjs"),
		url, "--name", name, "--call", tool, args)
	if err != nil {
		t.Fatalf("legacy sampling client %s as %s: %v\n%s%s", url, name, err, out, errOut)
	}
	var r samplingRun
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("legacy sampling client output %q: %v", out, err)
	}
	return r, strings.TrimSpace(out)
}

// TestDifferentialTSLegacyClientInfo is issue 16 case 13: the TS SDK client over the legacy
// HTTP+SSE transport, named lab-agent-untrusted, calls server-everything's sampling tool on its
// legacy SSE transport (3014). Its session is the endpoint event's URL, never an Mcp-Session-Id
// header, so a clientInfo kept only from a header-keyed session leaves every mcp.client_info rule
// blind to it. Control: directly the untrusted client is served the sampling request; a trusted
// name is allowed through Level 2 as directly. Through Level 2 the untrusted one's sampling
// request is denied by no-sampling-for-untrusted and the record names that rule.
func TestDifferentialTSLegacyClientInfo(t *testing.T) {
	needLab(t)
	everythingL2(t)
	const (
		url  = "http://10.200.2.2:3014/sse"
		tool = "trigger-sampling-request"
		args = `{"prompt":"say hi","maxTokens":5}`
	)
	untrusted, out := tsLegacySampling(t, url, "lab-agent-untrusted", tool, args)
	if untrusted.Served.Sampling != 1 || untrusted.Call.Error != nil || untrusted.Call.IsError {
		t.Fatalf("control: directly, the untrusted legacy client should be served the sampling request: %s", out)
	}
	_, trustedDirect := tsLegacySampling(t, url, "lab-agent", tool, args)

	a := startAppliance(t, "nftables-tproxy", tsConfig(t))
	if _, got := tsLegacySampling(t, url, "lab-agent", tool, args); canonical(t, got) != canonical(t, trustedDirect) {
		t.Errorf("trusted legacy client through Level 2:\n%s\nwant (direct)\n%s", got, trustedDirect)
	}
	blocked, out := tsLegacySampling(t, url, "lab-agent-untrusted", tool, args)
	t.Logf("untrusted legacy client through Level 2: %s", out)
	if blocked.Served.Sampling != 0 {
		t.Errorf("the untrusted legacy client was served the sampling request through Level 2: %s", out)
	}
	if !(blocked.Call.IsError || blocked.Call.Error != nil) || !strings.Contains(out, "mcpintercept") {
		t.Errorf("blocked legacy sampling: the call should end with the server's handling of the appliance's error: %s", out)
	}
	recs := a.stopGracefully(t)
	var denied, allowed int
	for _, r := range recs {
		if !strings.HasSuffix(r.OrigDst, ":3014") || r.Direction != "server_to_client" || r.MCPMethod != "sampling/createMessage" {
			continue
		}
		t.Logf("log: %s %s decision=%s rule=%s reason=%q", r.MCPMethod, r.MCPName, r.Decision, r.Rule, r.Reason)
		switch {
		case r.Decision == "deny" && r.Rule == "no-sampling-for-untrusted":
			denied++
		case r.Decision == "allow":
			allowed++
		}
	}
	if denied != 1 || allowed != 1 {
		t.Errorf("flow log: legacy sampling requests denied by no-sampling-for-untrusted %d (want 1), allowed %d (want 1, the trusted client)", denied, allowed)
	}
}

const tsCorpusAddr = "10.200.2.2:3042" // e2e/node/ts-corpus.mjs serve

// tsItem is one line of e2e/testdata/differential/ts-corpus.jsonl (the node script reads the
// payload; the test needs the name and the transport).
type tsItem struct {
	Name      string `json:"name"`
	Transport string `json:"transport"`
	Why       string `json:"why"`
}

// tsReport is what ts-corpus.mjs client prints for one item.
type tsReport struct {
	Name       string            `json:"name"`
	Transport  string            `json:"transport"`
	Dispatched []json.RawMessage `json:"dispatched"`
	Sampling   int               `json:"sampling"`
	Call       json.RawMessage   `json:"call"`
	End        string            `json:"end"`
	Errors     []string          `json:"errors"`
}

// tsMessage is the part of a dispatched JSON-RPC message the judge check reads.
type tsMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Error  *struct {
		Data struct {
			Intermediary string `json:"intermediary"`
		} `json:"data"`
	} `json:"error"`
}

// tsLogRecord is a flow log line with the request path (flowRecord has none).
type tsLogRecord struct {
	Path      string `json:"path"`
	OrigDst   string `json:"orig_dst"`
	Direction string `json:"direction"`
	MCPMethod string `json:"mcp_method"`
	JSONRPCID string `json:"jsonrpc_id"`
	Decision  string `json:"decision"`
	Rule      string `json:"rule"`
	Reason    string `json:"reason"`
}

func tsCorpusPath() string {
	return filepath.Join(repoRoot, "e2e", "testdata", "differential", "ts-corpus.jsonl")
}

func tsLoadCorpus(t *testing.T) []tsItem {
	t.Helper()
	b, err := os.ReadFile(tsCorpusPath())
	if err != nil {
		t.Fatal(err)
	}
	var items []tsItem
	for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var it tsItem
		if err := json.Unmarshal([]byte(l), &it); err != nil {
			t.Fatalf("corpus line %d: %v", i+1, err)
		}
		items = append(items, it)
	}
	return items
}

// tsCorpusRun runs the TS SDK client over every item from mcpi-client and returns its reports.
func tsCorpusRun(t *testing.T, n int) []tsReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // a hang guard; each item has its own
	defer cancel()
	out, errOut, err := run(ctx, nsClient, "node", filepath.Join(repoRoot, "e2e", "node", "ts-corpus.mjs"),
		"client", "http://"+tsCorpusAddr, tsCorpusPath(), "--name", "lab-agent-untrusted")
	if err != nil {
		t.Fatalf("ts-corpus client: %v\n%s", err, errOut)
	}
	var reps []tsReport
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r tsReport
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("ts-corpus client line %q: %v", l, err)
		}
		reps = append(reps, r)
	}
	if len(reps) != n {
		t.Fatalf("ts-corpus client reported %d items, the corpus has %d\n%s", len(reps), n, errOut)
	}
	return reps
}

// tsItemPath is where item i's records are: its POST path, or its legacy stream and endpoint.
func tsItemPath(i int, it tsItem) func(string) bool {
	if it.Transport == "legacy" {
		prefix := fmt.Sprintf("/legacy/%d/", i)
		return func(p string) bool { return strings.HasPrefix(p, prefix) }
	}
	path := fmt.Sprintf("/item/%d", i)
	return func(p string) bool { return p == path }
}

// tsSameID compares a dispatched id with a record's id as sent: numbers by value, strings
// exactly, as a judge that correlates by value must.
func tsSameID(dispatched json.RawMessage, logged string) bool {
	var a, b any
	if json.Unmarshal(dispatched, &a) != nil || json.Unmarshal([]byte(logged), &b) != nil {
		return false
	}
	switch a := a.(type) {
	case float64:
		b, ok := b.(float64)
		return ok && a == b
	case string:
		b, ok := b.(string)
		return ok && a == b
	}
	return false
}

// tsAnswers reports whether a dispatched response answers the logged request the way the TS SDK
// client pairs them: its Protocol looks the request up by Number(response.id), so the string
// "1" (or " 1 ", "0x1") answers request 1. Node itself computes Number(), not this test.
func tsAnswers(dispatched json.RawMessage, logged string) bool {
	want, err := strconv.ParseFloat(logged, 64)
	if err != nil {
		return tsSameID(dispatched, logged)
	}
	got, ok := tsNumberOf(string(dispatched))
	return ok && got == want
}

var (
	tsNumberMu    sync.Mutex
	tsNumberCache = map[string]float64{}
)

// tsNumberOf is JavaScript's Number(JSON.parse(raw)), asked of node (cached per id).
func tsNumberOf(raw string) (float64, bool) {
	tsNumberMu.Lock()
	defer tsNumberMu.Unlock()
	if v, ok := tsNumberCache[raw]; ok {
		return v, !math.IsNaN(v)
	}
	out, err := exec.Command("node", "-e", "process.stdout.write(String(Number(JSON.parse(process.argv[1]))))", raw).Output()
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(out), 64)
	if err != nil {
		v = math.NaN()
	}
	tsNumberCache[raw] = v
	return v, !math.IsNaN(v)
}

// tsJudged reports whether the flow log shows msg judged on the item's paths: a server request or
// notification has a server→client record of its own; a response is judged with the request it
// answers, on that request's record (same id, compared by value: a response the appliance did not
// correlate was judged by nobody).
func tsJudged(recs []tsLogRecord, onItem func(string) bool, m tsMessage) bool {
	for _, r := range recs {
		if !strings.HasSuffix(r.OrigDst, ":3042") || !onItem(r.Path) {
			continue
		}
		switch {
		case m.Method != "":
			if r.Direction == "server_to_client" && r.MCPMethod == m.Method && (len(m.ID) == 0 || tsSameID(m.ID, r.JSONRPCID)) {
				return true
			}
		case len(m.ID) > 0:
			if r.Direction == "client_to_server" && tsAnswers(m.ID, r.JSONRPCID) {
				return true
			}
		}
	}
	return false
}

// tsRecordsOf summarises an item's records for a failure message.
func tsRecordsOf(recs []tsLogRecord, onItem func(string) bool) string {
	var out []string
	for _, r := range recs {
		if strings.HasSuffix(r.OrigDst, ":3042") && onItem(r.Path) {
			out = append(out, fmt.Sprintf("[%s %s %s id=%s %s %s %q]", r.Path, r.Direction, r.MCPMethod, r.JSONRPCID, r.Decision, r.Rule, r.Reason))
		}
	}
	return strings.Join(out, " ")
}

var tsCanary = regexp.MustCompile(`CANARY-[0-9A-Za-z]+`)

// TestDifferentialTSCorpus is the TypeScript corpus differential: every item of
// e2e/testdata/differential/ts-corpus.jsonl (JSON bodies and SSE events built to probe the TS
// client's leniency: whitespace and BOMs, media types, event types, CR framing, multi-line data,
// batches mixing requests and responses, ids 1, 1.0 and "1"...) answers a real TS SDK client's
// tools/call. Directly, the client says what it dispatches. Through Level 2 (the client named
// lab-agent-untrusted, so every sampling request is denied by no-sampling-for-untrusted and
// every tools/call result is redacted by redact-canary), each message it dispatches must have
// been judged (a server→client record of it in the flow log); a sampling request and a canary
// are never delivered at all.
func TestDifferentialTSCorpus(t *testing.T) {
	needLab(t)
	items := tsLoadCorpus(t)
	tsNode(t, nsServer, "ts-corpus.mjs", "serve", tsCorpusAddr, tsCorpusPath())

	direct := tsCorpusRun(t, len(items))
	var samplingItems, canaryItems, dispatched int
	for i, r := range direct {
		if r.Name != items[i].Name || r.End == "timeout" || r.End == "connect-error" {
			t.Fatalf("control, item %d %q: %+v", i, items[i].Name, r)
		}
		dispatched += len(r.Dispatched)
		if r.Sampling > 0 {
			samplingItems++
		}
		if tsCanary.MatchString(string(r.Call)) {
			canaryItems++
		}
	}
	t.Logf("control: %d items, %d messages dispatched by the TS client, a sampling request served in %d items, a canary delivered in %d",
		len(items), dispatched, samplingItems, canaryItems)
	if samplingItems == 0 || canaryItems == 0 {
		t.Fatalf("control: the corpus no longer shows the TS client serving sampling (%d) or receiving a canary (%d)", samplingItems, canaryItems)
	}

	a := startAppliance(t, "nftables-tproxy", tsConfig(t))
	through := tsCorpusRun(t, len(items))
	a.stopGracefully(t)
	var recs []tsLogRecord
	for _, l := range strings.Split(a.stdout.String(), "\n") {
		var r tsLogRecord
		if json.Unmarshal([]byte(l), &r) == nil {
			recs = append(recs, r)
		}
	}

	var failed []string
	for i, r := range through {
		it := items[i]
		var why []string
		if r.Sampling > 0 {
			why = append(why, fmt.Sprintf("the client served %d sampling request(s)", r.Sampling))
		}
		if r.End == "timeout" {
			why = append(why, "no end within the item's hang guard")
		}
		for _, raw := range r.Dispatched {
			if c := tsCanary.FindString(string(raw)); c != "" {
				why = append(why, "a canary was delivered: "+string(raw))
				continue
			}
			var m tsMessage
			json.Unmarshal(raw, &m)
			if m.Error != nil && m.Error.Data.Intermediary == "mcpintercept" {
				continue // the appliance's own answer
			}
			if m.Method == "sampling/createMessage" {
				why = append(why, "a denied sampling request was delivered: "+string(raw))
			}
			if !tsJudged(recs, tsItemPath(i, it), m) {
				why = append(why, "dispatched but not in the flow log: "+string(raw))
			}
		}
		if c := tsCanary.FindString(string(r.Call)); c != "" {
			why = append(why, "the call's outcome carries a canary: "+string(r.Call))
		}
		if len(why) > 0 {
			failed = append(failed, fmt.Sprintf("item %d %q (%s; directly %d dispatched, %d sampling):\n    %s\n    records: %s",
				i, it.Name, it.Why, len(direct[i].Dispatched), direct[i].Sampling, strings.Join(why, "\n    "), tsRecordsOf(recs, tsItemPath(i, it))))
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d corpus items get past Level 2 with the TS SDK client:\n%s", len(failed), len(items), strings.Join(failed, "\n"))
	}
}
