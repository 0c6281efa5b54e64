package level2

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	segjson "github.com/segmentio/encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"mcpintercept/mcp"
)

// Case variants of the keys of whole messages, judged against the Go SDK's own decoding.
//
// The Go SDK (v1.8) decodes most of a message with its internal JSON package, which matches
// struct fields case-sensitively, but not all of it: the entries of an input_required result's
// inputRequests (method, params, and every member of the elicitation, sampling and roots params
// in them), a retry's inputResponses and an error's data (URL elicitations, supported versions)
// go through encoding/json, which matches "Method", "MODE" or "maſk" to method, mode and mask.
// Go peers that decode with encoding/json throughout (the Go SDK before #805, other Go servers)
// do so everywhere. Level 2 reads members by their exact keys, so wherever a peer folds a key
// onto a member, Level 2 must refuse the spelling: otherwise it judges a message without that
// member while the peer acts on it.

// caseMessage is a real message and the method it belongs to (a response's request).
type caseMessage struct {
	name, method, raw string
}

// caseCorpus holds one message of every kind Level 2 judges, each member with a value that
// differs from its zero value (so that a peer reading it or not shows).
var caseCorpus = []caseMessage{
	{"tools/call", "tools/call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},` +
		`"_meta":{"progressToken":"p1","io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientInfo":{"name":"agent","version":"1.0","title":"Agent"},` +
		`"io.modelcontextprotocol/clientCapabilities":{"sampling":{"tools":{}},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}}}}}`},
	{"initialize", "initialize", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",` +
		`"capabilities":{"roots":{"listChanged":true},"sampling":{"context":{}},"elicitation":{"form":{},"url":{}}},` +
		`"clientInfo":{"name":"agent","version":"1.0","title":"Agent","websiteUrl":"https://a.test"}}}`},
	{"initialize result", "initialize", `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25",` +
		`"capabilities":{"tools":{"listChanged":true},"logging":{},"prompts":{"listChanged":true},"resources":{"subscribe":true}},` +
		`"serverInfo":{"name":"srv","version":"2.0"},"instructions":"be kind"}}`},
	{"tools/list result", "tools/list", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"denied_delete","title":"Delete",` +
		`"description":"deletes","inputSchema":{"type":"object","properties":{"path":{"type":"string"}}},` +
		`"annotations":{"readOnlyHint":true,"destructiveHint":true,"title":"D"}}],"nextCursor":"c2"}}`},
	{"prompts/list result", "prompts/list", `{"jsonrpc":"2.0","id":1,"result":{"prompts":[{"name":"p","description":"d",` +
		`"arguments":[{"name":"a","description":"x","required":true}]}],"nextCursor":"c"}}`},
	{"resources/list result", "resources/list", `{"jsonrpc":"2.0","id":1,"result":{"resources":[{"uri":"file:///a","name":"a","mimeType":"text/plain","size":3}]}}`},
	{"resources/templates/list result", "resources/templates/list", `{"jsonrpc":"2.0","id":1,"result":{"resourceTemplates":[{"uriTemplate":"file:///{x}","name":"t"}]}}`},
	{"tools/call result", "tools/call", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"CANARY-1"},` +
		`{"type":"resource","resource":{"uri":"file:///s","text":"CANARY-2","mimeType":"text/plain"}}],` +
		`"structuredContent":{"a":1},"isError":true}}`},
	{"input_required result", "tools/call", `{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{` +
		`"s":{"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5,"systemPrompt":"sys"}},` +
		`"e":{"method":"elicitation/create","params":{"mode":"url","message":"go","url":"https://evil.test","elicitationId":"e1"}},` +
		`"r":{"method":"roots/list","params":{"_meta":{"k":"v"}}}},"requestState":"st"}}`},
	{"sampling request", "sampling/createMessage", `{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":{` +
		`"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5,"systemPrompt":"sys",` +
		`"modelPreferences":{"hints":[{"name":"claude"}],"costPriority":0.5},"includeContext":"none","temperature":0.5}}`},
	{"elicitation request (url)", "elicitation/create", `{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{` +
		`"mode":"url","message":"go","url":"https://evil.test","elicitationId":"e1"}}`},
	{"elicitation request (form)", "elicitation/create", `{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{` +
		`"message":"pin?","requestedSchema":{"type":"object","properties":{"pin":{"type":"string"}}}}}`},
	{"roots/list request", "roots/list", `{"jsonrpc":"2.0","id":9,"method":"roots/list","params":{"_meta":{"k":"v"}}}`},
	{"progress", "notifications/progress", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p1","progress":1,"total":2,"message":"CANARY-3"}}`},
	{"log", "notifications/message", `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"l","data":"CANARY-4"}}`},
	{"retry", "tools/call", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},` +
		`"inputResponses":{"s":{"role":"assistant","content":{"type":"text","text":"x"},"model":"m","stopReason":"endTurn"},` +
		`"e":{"action":"accept","content":{"pin":"1"}},"r":{"roots":[{"uri":"file:///r","name":"r"}]}},"requestState":"st"}}`},
	{"prompts/get", "prompts/get", `{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":{"name":"p","arguments":{"a":"b"}}}`},
	{"resources/read", "resources/read", `{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"file:///a"}}`},
	{"prompts/get result", "prompts/get", `{"jsonrpc":"2.0","id":3,"result":{"description":"d","messages":[{"role":"user","content":{"type":"text","text":"CANARY-5"}}]}}`},
	{"resources/read result", "resources/read", `{"jsonrpc":"2.0","id":4,"result":{"contents":[{"uri":"file:///a","mimeType":"text/plain","text":"CANARY-6"}]}}`},
	{"sampling result", "sampling/createMessage", `{"jsonrpc":"2.0","id":9,"result":{"role":"assistant","content":{"type":"text","text":"x"},"model":"m","stopReason":"endTurn"}}`},
	{"elicitation result", "elicitation/create", `{"jsonrpc":"2.0","id":9,"result":{"action":"accept","content":{"pin":"1"}}}`},
	{"roots/list result", "roots/list", `{"jsonrpc":"2.0","id":9,"result":{"roots":[{"uri":"file:///r","name":"r"}]}}`},
	{"URL elicitation error", "tools/call", `{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"needs","data":{` +
		`"elicitations":[{"mode":"url","message":"go","url":"https://evil.test","elicitationId":"e1"}]}}}`},
	{"unsupported version error", "server/discover", `{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"v","data":{"supported":["2025-11-25"]}}}`},
}

// paramsTypes and resultTypes are the Go SDK types a method's params and result decode into.
var paramsTypes = map[string]func() any{
	"tools/call":             func() any { return new(sdkmcp.CallToolParamsRaw) },
	"initialize":             func() any { return new(sdkmcp.InitializeParams) },
	"sampling/createMessage": func() any { return new(sdkmcp.CreateMessageWithToolsParams) },
	"elicitation/create":     func() any { return new(sdkmcp.ElicitParams) },
	"roots/list":             func() any { return new(sdkmcp.ListRootsParams) },
	"notifications/progress": func() any { return new(sdkmcp.ProgressNotificationParams) },
	"notifications/message":  func() any { return new(sdkmcp.LoggingMessageParams) },
	"prompts/get":            func() any { return new(sdkmcp.GetPromptParams) },
	"resources/read":         func() any { return new(sdkmcp.ReadResourceParams) },
}

var resultTypes = map[string]func() any{
	"tools/call":               func() any { return new(sdkmcp.CallToolResult) },
	"initialize":               func() any { return new(sdkmcp.InitializeResult) },
	"tools/list":               func() any { return new(sdkmcp.ListToolsResult) },
	"prompts/list":             func() any { return new(sdkmcp.ListPromptsResult) },
	"resources/list":           func() any { return new(sdkmcp.ListResourcesResult) },
	"resources/templates/list": func() any { return new(sdkmcp.ListResourceTemplatesResult) },
	"prompts/get":              func() any { return new(sdkmcp.GetPromptResult) },
	"resources/read":           func() any { return new(sdkmcp.ReadResourceResult) },
	"sampling/createMessage":   func() any { return new(sdkmcp.CreateMessageWithToolsResult) },
	"elicitation/create":       func() any { return new(sdkmcp.ElicitResult) },
	"roots/list":               func() any { return new(sdkmcp.ListRootsResult) },
	"server/discover":          func() any { return new(sdkmcp.DiscoverResult) },
}

// peerReader is how one Go peer decodes a message: it returns a canonical rendering of what the
// peer acts on ("" when the peer rejects the message).
type peerReader struct {
	name string
	read func(method string, raw []byte) string
}

// sdkUnmarshal is the Go SDK's internal JSON decoding (internal/json): segmentio's decoder with
// case-insensitive struct field matching turned off. Types with an UnmarshalJSON of their own
// run it, as in the SDK (InputRequestMap's uses encoding/json).
func sdkUnmarshal(b []byte, v any) error {
	dec := segjson.NewDecoder(bytes.NewReader(b))
	dec.DontMatchCaseInsensitiveStructFields()
	return dec.Decode(v)
}

// errorData is what the Go SDK client reads from an error's data (client.go: the URL
// elicitations of -32042, the supported versions of an unsupported-version error), with
// encoding/json.
type errorData struct {
	Elicitations []*sdkmcp.ElicitParams `json:"elicitations"`
	Supported    []string               `json:"supported"`
}

var goPeers = []peerReader{
	{"go-sdk", func(method string, raw []byte) string {
		msg, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return ""
		}
		switch m := msg.(type) {
		case *jsonrpc.Request:
			return render("request", m.Method, typed(paramsTypes[m.Method], m.Params, sdkUnmarshal), "")
		case *jsonrpc.Response:
			if m.Error != nil {
				we, ok := m.Error.(*jsonrpc.Error)
				if !ok {
					return "error " + m.Error.Error()
				}
				return render("error", method, nil, renderError(we))
			}
			return render("response", method, typed(resultTypes[method], m.Result, sdkUnmarshal), "")
		}
		return ""
	}},
	{"encoding/json", func(method string, raw []byte) string {
		var w struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      any             `json:"id"`
			Method  *string         `json:"method"`
			Params  json.RawMessage `json:"params"`
			Result  json.RawMessage `json:"result"`
			Error   *struct {
				Code    int64           `json:"code"`
				Message string          `json:"message"`
				Data    json.RawMessage `json:"data"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &w) != nil {
			return ""
		}
		switch {
		case w.Method != nil:
			return render("request", *w.Method, typed(paramsTypes[*w.Method], w.Params, json.Unmarshal), "")
		case w.Error != nil:
			return render("error", method, nil, renderError(&jsonrpc.Error{Code: w.Error.Code, Message: w.Error.Message, Data: w.Error.Data}))
		}
		return render("response", method, typed(resultTypes[method], w.Result, json.Unmarshal), "")
	}},
}

func typed(mk func() any, raw json.RawMessage, unmarshal func([]byte, any) error) any {
	if mk == nil || len(raw) == 0 {
		return string(raw)
	}
	v := mk()
	if err := unmarshal(raw, v); err != nil {
		return "invalid: " + err.Error()
	}
	return v
}

func renderError(e *jsonrpc.Error) string {
	var d errorData
	_ = json.Unmarshal(e.Data, &d) // the SDK client's own decoding of error data
	b, _ := json.Marshal(d)
	return fmt.Sprintf("%d %s %s", e.Code, e.Message, b)
}

func render(kind, method string, v any, extra string) string {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(err.Error())
	}
	return kind + " " + method + " " + string(b) + " " + extra
}

// keySpans returns the [start, end) of every key (quotes included) of the validated JSON v.
func keySpans(v []byte, base int, out [][2]int) [][2]int {
	switch v[0] {
	case '[':
		for _, e := range mcp.Elements(v) {
			out = keySpans(v[e[0]:e[1]], base+e[0], out)
		}
	case '{':
		i := mcp.SkipSpace(v, 1)
		for i < len(v) && v[i] == '"' {
			ke := mcp.SkipString(v, i)
			out = append(out, [2]int{base + i, base + ke})
			vs := mcp.SkipSpace(v, mcp.SkipSpace(v, ke)+1)
			ve := mcp.SkipValue(v, vs)
			out = keySpans(v[vs:ve], base+vs, out)
			i = mcp.SkipSpace(v, ve)
			if i >= len(v) || v[i] != ',' {
				break
			}
			i = mcp.SkipSpace(v, i+1)
		}
	}
	return out
}

// caseSpellings are the spellings of key that fold equal to it and are not it: all upper case,
// the first letter upper case, and each rune replaced by the other members of its fold orbit
// (ſ for s, K for k).
func caseSpellings(key string) []string {
	seen := map[string]bool{key: true}
	var out []string
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	add(strings.ToUpper(key))
	if r, n := utf8.DecodeRuneInString(key); n > 0 {
		add(string(unicode.ToUpper(r)) + key[n:])
	}
	for i, r := range key {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f >= utf8.RuneSelf {
				add(key[:i] + string(f) + key[i+utf8.RuneLen(r):])
			}
		}
	}
	return out
}

// clientAnswered are the methods of the corpus's server→client requests: their results come
// from the client, whose response Level 2 does not pair with the request.
var clientAnswered = map[string]bool{"sampling/createMessage": true, "elicitation/create": true, "roots/list": true}

// decodeAnswer is Level 2's reading of raw, a message of method or a response to a request of
// it: the decoder, then a server's result judged by its request's method (as responses does),
// a client's by the results of every server→client request (as decodeRequest does).
func decodeAnswer(method string, raw []byte) error {
	msgs, _, err := mcp.Decode(raw, mcp.DecodeOptions{})
	if err != nil {
		return err
	}
	if clientAnswered[method] {
		return msgs[0].CheckClientResult()
	}
	return msgs[0].CheckResult(method)
}

// caseVariantHoles runs every case spelling of every key of the corpus through Level 2's decoder
// and the Go peers (variantHoles).
func caseVariantHoles(t *testing.T) (holes []string, tried int) {
	for _, c := range caseCorpus {
		raw := []byte(c.raw)
		if _, _, err := mcp.Decode(raw, mcp.DecodeOptions{}); err != nil {
			t.Fatalf("%s: the original is refused: %v", c.name, err)
		}
		for _, ks := range keySpans(raw, 0, nil) {
			for _, sp := range caseSpellings(mcp.Unquote(raw[ks[0]:ks[1]])) {
				tried++
				holes = append(holes, variantHoles(c, ks, sp)...)
			}
		}
	}
	sort.Strings(holes)
	return holes, tried
}

// variantHoles puts spelling sp in place of the key at ks of c's message. A hole is a spelling
// Level 2 accepts that a peer reads as the key: the peer reads the message with it as it reads
// the original, and the key matters to it (renamed to an unrelated name, the peer reads
// something else).
func variantHoles(c caseMessage, ks [2]int, sp string) []string {
	raw := []byte(c.raw)
	key := mcp.Unquote(raw[ks[0]:ks[1]])
	if sp == key {
		return nil
	}
	with := func(k string) []byte {
		return append(append(append([]byte{}, raw[:ks[0]]...), mcp.Quote(k)...), raw[ks[1]:]...)
	}
	variant := with(sp)
	if err := decodeAnswer(c.method, variant); err != nil {
		return nil // refused: nobody is told anything
	}
	renamed := with("zz_unrelated_" + key)
	var holes []string
	for _, p := range goPeers {
		orig, got := p.read(c.method, raw), p.read(c.method, variant)
		if orig == "" || got != orig || p.read(c.method, renamed) == orig {
			continue // the peer does not read this spelling as the key, or the key is nothing to it
		}
		holes = append(holes, fmt.Sprintf("%s: %s reads %+q as %q (at byte %d), Level 2 accepts it", c.name, p.name, sp, key, ks[0]))
	}
	return holes
}

// FuzzMessageCaseVariant is TestCaseVariantMessagesDifferential over any spelling: the key at
// position key of corpus message msg is replaced by spelling, and no Go peer may read the
// message as the original while Level 2 accepts it.
func FuzzMessageCaseVariant(f *testing.F) {
	f.Add(uint8(8), uint16(3), "Method")
	f.Add(uint8(8), uint16(11), "MODE")
	f.Add(uint8(3), uint16(0), "toolſ")
	f.Add(uint8(3), uint16(1), "nAmE")
	f.Add(uint8(23), uint16(0), "eliCitations")
	f.Add(uint8(0), uint16(3), "_META")
	f.Add(uint8(15), uint16(2), "InputResponses")
	f.Fuzz(func(t *testing.T, msg uint8, key uint16, spelling string) {
		c := caseCorpus[int(msg)%len(caseCorpus)]
		spans := keySpans([]byte(c.raw), 0, nil)
		if h := variantHoles(c, spans[int(key)%len(spans)], spelling); len(h) > 0 {
			t.Fatal(strings.Join(h, "\n"))
		}
	})
}

// TestCaseVariantMessagesDifferential: no case spelling of any key of any message kind is read
// by a Go peer as the key while Level 2 accepts the message (and so judges it without that
// member).
func TestCaseVariantMessagesDifferential(t *testing.T) {
	holes, tried := caseVariantHoles(t)
	t.Logf("%d spellings tried over %d messages", tried, len(caseCorpus))
	for _, h := range holes {
		t.Error(h)
	}
	if len(holes) > 0 {
		t.Errorf("%d case variants a Go peer reads as the member while Level 2 accepts the message", len(holes))
	}
}

// The premise: the peers do fold keys Level 2 reads, so the differential is not vacuous. The Go
// SDK itself reads an input request's "Method" and "MODE"; encoding/json reads a list's "Tools".
func TestCaseVariantPeersFold(t *testing.T) {
	for _, c := range []struct {
		peer, method, orig, variant string
	}{
		{"go-sdk", "tools/call", caseCorpus[8].raw, strings.Replace(caseCorpus[8].raw, `"method":"elicitation/create"`, `"Method":"elicitation/create"`, 1)},
		{"go-sdk", "tools/call", caseCorpus[8].raw, strings.Replace(caseCorpus[8].raw, `"mode":"url"`, `"MODE":"url"`, 1)},
		{"go-sdk", "tools/call", caseCorpus[23].raw, strings.Replace(caseCorpus[23].raw, `"elicitations"`, `"Elicitations"`, 1)},
		{"encoding/json", "tools/list", caseCorpus[3].raw, strings.Replace(caseCorpus[3].raw, `"tools"`, `"Tools"`, 1)},
		{"encoding/json", "tools/list", caseCorpus[3].raw, strings.Replace(caseCorpus[3].raw, `"name":"denied_delete"`, `"Name":"denied_delete"`, 1)},
	} {
		var p peerReader
		for _, g := range goPeers {
			if g.name == c.peer {
				p = g
			}
		}
		if c.orig == c.variant {
			t.Fatalf("variant not made: %s", c.orig)
		}
		if a, b := p.read(c.method, []byte(c.orig)), p.read(c.method, []byte(c.variant)); a != b || a == "" {
			t.Errorf("%s does not read %s as the original:\n%s\n%s", c.peer, c.variant, a, b)
		}
	}
}

// The corpus's types are the SDK's: every message decodes with the SDK's reader into a value
// that is not empty (a corpus entry with a typo would test nothing).
func TestCaseCorpusDecodes(t *testing.T) {
	for _, c := range caseCorpus {
		got := goPeers[0].read(c.method, []byte(c.raw))
		if got == "" || strings.Contains(got, "invalid:") || reflect.DeepEqual(got, "") {
			t.Errorf("%s: %s", c.name, got)
		}
	}
}

// tsReads is the TypeScript SDK's reading of messages, with its own zod schemas (as its
// transports and Protocol.request parse them): the envelope with JSONRPCMessageSchema, then the
// request or notification with its method's schema, a result with the schema of its request's
// method. It prints, per input, the parsed value as JSON ("" when a schema rejects it).
const tsReads = `
const t = await import("@modelcontextprotocol/sdk/types.js");
const req = {"tools/call": t.CallToolRequestSchema, "initialize": t.InitializeRequestSchema,
  "sampling/createMessage": t.CreateMessageRequestSchema, "elicitation/create": t.ElicitRequestSchema,
  "roots/list": t.ListRootsRequestSchema, "notifications/progress": t.ProgressNotificationSchema,
  "notifications/message": t.LoggingMessageNotificationSchema, "prompts/get": t.GetPromptRequestSchema,
  "resources/read": t.ReadResourceRequestSchema};
const res = {"tools/call": t.CallToolResultSchema, "initialize": t.InitializeResultSchema,
  "tools/list": t.ListToolsResultSchema, "prompts/list": t.ListPromptsResultSchema,
  "resources/list": t.ListResourcesResultSchema, "resources/templates/list": t.ListResourceTemplatesResultSchema,
  "prompts/get": t.GetPromptResultSchema, "resources/read": t.ReadResourceResultSchema,
  "sampling/createMessage": t.CreateMessageResultSchema, "elicitation/create": t.ElicitResultSchema,
  "roots/list": t.ListRootsResultSchema};
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const out = input.map(([method, raw]) => {
  try {
    const v = JSON.parse(raw);
    const env = t.JSONRPCMessageSchema.safeParse(v);
    if (!env.success) return "";
    const m = env.data;
    if ("method" in m) {
      const s = req[m.method];
      const p = s ? s.safeParse(m) : {success: true, data: m};
      return p.success ? "request " + JSON.stringify(p.data) : "";
    }
    if ("error" in m) return "error " + JSON.stringify(m.error);
    const s = res[method];
    const p = s ? s.safeParse(m.result) : {success: true, data: m.result};
    return p.success ? "result " + JSON.stringify(p.data) : "";
  } catch (e) { return ""; }
});
process.stdout.write(JSON.stringify(out));
`

// TestCaseVariantMessagesTS is the differential with the TypeScript SDK's schemas as the peer
// (run by node in e2e/node, where the SDK is installed): no spelling Level 2 accepts is read by
// it as the key. Its zod schemas match keys exactly, so this holds whatever Level 2 refuses; the
// test keeps it so if a later SDK changes that.
func TestCaseVariantMessagesTS(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: the TypeScript SDK differential needs it")
	}
	dir, _ := filepath.Abs("../e2e/node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Skip("the TypeScript SDK is not installed in e2e/node (make deps)")
	}
	type trial struct {
		c                     caseMessage
		key, sp               string
		orig, variant, rename int // indexes into inputs
		accepted              bool
	}
	var inputs [][2]string
	add := func(method string, b []byte) int {
		inputs = append(inputs, [2]string{method, string(b)})
		return len(inputs) - 1
	}
	var trials []trial
	for _, c := range caseCorpus {
		raw := []byte(c.raw)
		orig := add(c.method, raw)
		for _, ks := range keySpans(raw, 0, nil) {
			key := mcp.Unquote(raw[ks[0]:ks[1]])
			with := func(k string) []byte {
				return append(append(append([]byte{}, raw[:ks[0]]...), mcp.Quote(k)...), raw[ks[1]:]...)
			}
			rename := add(c.method, with("zz_unrelated_"+key))
			for _, sp := range caseSpellings(key) {
				v := with(sp)
				err := decodeAnswer(c.method, v)
				trials = append(trials, trial{c, key, sp, orig, add(c.method, v), rename, err == nil})
			}
		}
	}
	in, _ := json.Marshal(inputs)
	cmd := exec.Command(node, "--input-type=commonjs", "-e", "(async () => {"+tsReads+"})()")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var reads []string
	if err := json.Unmarshal(out, &reads); err != nil || len(reads) != len(inputs) {
		t.Fatalf("node output (%d readings for %d inputs): %v\n%.500s", len(reads), len(inputs), err, out)
	}
	read, holes := 0, 0
	for _, tr := range trials {
		o := reads[tr.orig]
		if o == "" {
			t.Fatalf("%s: the TypeScript SDK rejects the original", tr.c.name)
		}
		if reads[tr.variant] != o || reads[tr.rename] == o {
			continue
		}
		read++
		if tr.accepted {
			holes++
			t.Errorf("%s: the TypeScript SDK reads %+q as %q, Level 2 accepts it", tr.c.name, tr.sp, tr.key)
		}
	}
	t.Logf("%d spellings, %d read by the TypeScript SDK as the key, %d of them accepted by Level 2", len(trials), read, holes)
}
