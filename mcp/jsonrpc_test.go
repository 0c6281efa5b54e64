package mcp

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeAccepts(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		kind   MessageKind
		id     string // raw
		method string
		params string
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, KindRequest, `1`, "tools/list", ""},
		{"string id", `{"jsonrpc":"2.0","id":"a-1","method":"ping","params":{}}`, KindRequest, `"a-1"`, "ping", `{}`},
		{"id kept as sent", `{"jsonrpc":"2.0","id":"a\u0062\/","method":"ping"}`, KindRequest, `"a\u0062\/"`, "ping", ""},
		{"number id kept as sent", `{"jsonrpc":"2.0","id":1e3,"method":"ping"}`, KindRequest, `1e3`, "ping", ""},
		{"negative zero id", `{"jsonrpc":"2.0","id":-0,"method":"ping"}`, KindRequest, `-0`, "ping", ""},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, KindNotification, "", "notifications/initialized", ""},
		{"escaped method", `{"jsonrpc":"2.0","id":2,"method":"tools\/c\u0061ll","params":{"name":"x"}}`, KindRequest, `2`, "tools/call", `{"name":"x"}`},
		{"whitespace everywhere", " \t\r\n{ \"jsonrpc\" : \"2.0\" , \"id\" : 3 , \"method\" : \"m\" , \"params\" : [ 1 , 2 ] } \n", KindRequest, `3`, "m", `[ 1 , 2 ]`},
		{"params null kept", `{"jsonrpc":"2.0","id":3,"method":"m","params":null}`, KindRequest, `3`, "m", `null`},
		{"response", `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`, KindResponse, `1`, "", ""},
		{"error", `{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"nope","data":{"a":1}}}`, KindError, `"x"`, "", ""},
		{"error with null id", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}`, KindError, "", "", ""},
		{"unknown member ignored", `{"jsonrpc":"2.0","id":1,"method":"m","extra":true}`, KindRequest, `1`, "m", ""},
		{"non-ASCII strings", `{"jsonrpc":"2.0","id":"é","method":"tools/call","params":{"name":"日本","arguments":{"k":"😀\ud83d\ude00"}}}`, KindRequest, `"é"`, "tools/call", `{"name":"日本","arguments":{"k":"😀\ud83d\ude00"}}`},
		{"same key in different objects", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":{"a":1},"b":{"a":2}}}`, KindRequest, `1`, "m", `{"a":{"a":1},"b":{"a":2}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeMessage([]byte(tt.body), DecodeOptions{})
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if m.Kind != tt.kind || string(m.ID) != tt.id || m.Method != tt.method || string(m.Params) != tt.params {
				t.Fatalf("got kind=%v id=%s method=%q params=%s", m.Kind, m.ID, m.Method, m.Params)
			}
			if got := strings.TrimSpace(tt.body); string(m.Raw) != got {
				t.Fatalf("Raw = %s, want %s", m.Raw, got)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	deep := func(n int) string {
		return `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}}`
	}
	tests := []struct {
		name string
		body string
		want error
	}{
		{"empty", ``, ErrSyntax},
		{"only whitespace", " \n", ErrSyntax},
		{"truncated", `{"jsonrpc":"2.0","id":1,"method":"tools/ca`, ErrSyntax},
		{"truncated after colon", `{"jsonrpc":"2.0","id":`, ErrSyntax},
		{"truncated escape", `{"jsonrpc":"2.0","id":"\`, ErrSyntax},
		{"trailing garbage", `{"jsonrpc":"2.0","id":1,"method":"m"}x`, ErrSyntax},
		{"two documents", `{"jsonrpc":"2.0","id":1,"method":"m"}{"jsonrpc":"2.0","id":2,"method":"n"}`, ErrSyntax},
		{"trailing comma", `{"jsonrpc":"2.0","id":1,"method":"m",}`, ErrSyntax},
		{"single quotes", `{'jsonrpc':"2.0"}`, ErrSyntax},
		{"leading zero", `{"jsonrpc":"2.0","id":01,"method":"m"}`, ErrSyntax},
		{"bare fraction", `{"jsonrpc":"2.0","id":1.,"method":"m"}`, ErrSyntax},
		{"NaN", `{"jsonrpc":"2.0","id":NaN,"method":"m"}`, ErrSyntax},
		{"control char in string", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\tb\"}", ErrSyntax},
		{"BOM", "\uFEFF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}", ErrSyntax},
		{"bad escape", `{"jsonrpc":"2.0","id":1,"method":"\x41"}`, ErrSyntax},
		{"duplicate method", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}`, ErrDuplicateKey},
		{"duplicate via escape", `{"jsonrpc":"2.0","id":1,"method":"a","m\u0065thod":"b"}`, ErrDuplicateKey},
		{"duplicate deep in arguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"path":"/ok","path":"/etc"}}}`, ErrDuplicateKey},
		{"duplicate in array element", `{"jsonrpc":"2.0","id":1,"method":"m","params":[{"a":1,"a":2}]}`, ErrDuplicateKey},
		{"duplicate name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ok","name":"evil"}}`, ErrDuplicateKey},
		{"Method", `{"jsonrpc":"2.0","id":1,"Method":"tools/call"}`, ErrCaseVariantKey},
		{"method and Method", `{"jsonrpc":"2.0","id":1,"method":"tools/list","Method":"tools/call"}`, ErrCaseVariantKey},
		{"long s params", `{"jsonrpc":"2.0","id":1,"method":"m","paramſ":{}}`, ErrCaseVariantKey},
		{"JSONRPC", `{"JSONRPC":"2.0","id":1,"method":"m"}`, ErrCaseVariantKey},
		{"ID", `{"jsonrpc":"2.0","ID":1,"method":"m"}`, ErrCaseVariantKey},
		{"params Name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"evil"}}`, ErrCaseVariantKey},
		{"params name and NAME", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ok","NAME":"evil"}}`, ErrCaseVariantKey},
		{"argument case variants", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"path":"/ok","Path":"/etc"}}}`, ErrCaseVariantKey},
		{"kelvin sign", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"k":1,"K":2}}`, ErrCaseVariantKey},
		{"meta version variant", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolversion":"x"}}}`, ErrCaseVariantKey},
		{"error Code", `{"jsonrpc":"2.0","id":1,"error":{"Code":1,"message":"m"}}`, ErrCaseVariantKey},
		{"too deep", deep(63), ErrTooDeep},
		{"invalid UTF-8 in value", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\xffb\"}}", ErrInvalidUTF8},
		{"invalid UTF-8 in key", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"params\":{\"n\xc3\":1}}", ErrInvalidUTF8},
		{"overlong UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xc0\xaf\"}", ErrInvalidUTF8},
		{"UTF-8 surrogate", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xed\xa0\x80\"}", ErrInvalidUTF8},
		{"lone high surrogate", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\ud800"}}`, ErrLoneSurrogate},
		{"lone low surrogate", `{"jsonrpc":"2.0","id":1,"method":"\udc00"}`, ErrLoneSurrogate},
		{"high then non-low", `{"jsonrpc":"2.0","id":1,"method":"\ud800\u0041"}`, ErrLoneSurrogate},
		{"surrogate in key", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"\ud800":1}}`, ErrLoneSurrogate},
		{"not an object", `"hello"`, ErrInvalidMessage},
		{"no jsonrpc", `{"id":1,"method":"m"}`, ErrInvalidMessage},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":1,"method":"m"}`, ErrInvalidMessage},
		{"jsonrpc number", `{"jsonrpc":2.0,"id":1,"method":"m"}`, ErrInvalidMessage},
		{"null request id", `{"jsonrpc":"2.0","id":null,"method":"m"}`, ErrInvalidMessage},
		{"bool id", `{"jsonrpc":"2.0","id":true,"method":"m"}`, ErrInvalidMessage},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"m"}`, ErrInvalidMessage},
		{"method number", `{"jsonrpc":"2.0","id":1,"method":7}`, ErrInvalidMessage},
		{"params string", `{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}`, ErrInvalidMessage},
		{"result and error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"m"}}`, ErrInvalidMessage},
		{"method and result", `{"jsonrpc":"2.0","id":1,"method":"m","result":{}}`, ErrInvalidMessage},
		{"response without id", `{"jsonrpc":"2.0","result":{}}`, ErrInvalidMessage},
		{"result with null id", `{"jsonrpc":"2.0","id":null,"result":{}}`, ErrInvalidMessage},
		{"nothing", `{"jsonrpc":"2.0","id":1}`, ErrInvalidMessage},
		{"error code string", `{"jsonrpc":"2.0","id":1,"error":{"code":"1","message":"m"}}`, ErrInvalidMessage},
		{"error code fraction", `{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}`, ErrInvalidMessage},
		{"error without message", `{"jsonrpc":"2.0","id":1,"error":{"code":1}}`, ErrInvalidMessage},
		{"error not object", `{"jsonrpc":"2.0","id":1,"error":"boom"}`, ErrInvalidMessage},
		{"batch refused", `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, ErrBatchNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeMessage([]byte(tt.body), DecodeOptions{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v (msg %+v), want %v", err, m, tt.want)
			}
		})
	}
}

func TestDecodeDepthBoundary(t *testing.T) {
	// The message object is level 1, params level 2, so params may hold DefaultMaxDepth-2 more.
	body := func(n int) []byte {
		return []byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
	}
	if _, err := DecodeMessage(body(DefaultMaxDepth-1), DecodeOptions{}); err != nil {
		t.Fatalf("depth %d: %v", DefaultMaxDepth, err)
	}
	if _, err := DecodeMessage(body(DefaultMaxDepth), DecodeOptions{}); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("depth %d: err = %v, want ErrTooDeep", DefaultMaxDepth+1, err)
	}
	if _, err := DecodeMessage(body(3), DecodeOptions{MaxDepth: 3}); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("MaxDepth 3: err = %v", err)
	}
	// A hostile depth far beyond the bound fails fast without recursing that far.
	huge := []byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":` + strings.Repeat("[", 1<<20))
	if _, err := DecodeMessage(huge, DecodeOptions{MaxSize: 2 << 20}); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("huge depth: err = %v", err)
	}
}

func TestDecodeSize(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":{"pad":"` + strings.Repeat("x", 100) + `"}}`)
	if _, err := DecodeMessage(body, DecodeOptions{MaxSize: len(body)}); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	if _, err := DecodeMessage(body, DecodeOptions{MaxSize: len(body) - 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the bound: err = %v", err)
	}
}

func TestDecodeBatch(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		allow bool
		n     int
		want  error
	}{
		{"refused without AllowBatch", `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, false, 0, ErrBatchNotAllowed},
		{"one", `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, true, 1, nil},
		{"mixed", ` [ {"jsonrpc":"2.0","id":1,"method":"a"} , {"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":9,"result":{}} ] `, true, 3, nil},
		{"empty", `[]`, true, 0, ErrInvalidMessage},
		{"empty with space", `[ ]`, true, 0, ErrInvalidMessage},
		{"non-object element", `[{"jsonrpc":"2.0","id":1,"method":"m"},1]`, true, 0, ErrInvalidMessage},
		{"nested batch", `[[{"jsonrpc":"2.0","id":1,"method":"m"}]]`, true, 0, ErrInvalidMessage},
		{"bad element", `[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","id":1,"Method":"m"}]`, true, 0, ErrCaseVariantKey},
		{"duplicate in element", `[{"jsonrpc":"2.0","id":1,"method":"m","id":2}]`, true, 0, ErrDuplicateKey},
		{"trailing comma", `[{"jsonrpc":"2.0","id":1,"method":"m"},]`, true, 0, ErrSyntax},
		{"truncated", `[{"jsonrpc":"2.0","id":1,"method":"m"}`, true, 0, ErrSyntax},
		{"trailing garbage", `[{"jsonrpc":"2.0","id":1,"method":"m"}]]`, true, 0, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, batch, err := Decode([]byte(tt.body), DecodeOptions{AllowBatch: tt.allow})
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if err == nil && (!batch || len(msgs) != tt.n) {
				t.Fatalf("batch=%v n=%d, want %d", batch, len(msgs), tt.n)
			}
		})
	}
	msgs, _, err := Decode([]byte(`[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":"2","method":"b"}]`), DecodeOptions{AllowBatch: true})
	if err != nil || string(msgs[0].ID) != "1" || msgs[1].Method != "b" || string(msgs[1].Raw) != `{"jsonrpc":"2.0","id":"2","method":"b"}` {
		t.Fatalf("batch contents: %v %+v", err, msgs)
	}
	// A single message is not a batch even when batches are allowed.
	if _, batch, err := Decode([]byte(`{"jsonrpc":"2.0","id":1,"method":"a"}`), DecodeOptions{AllowBatch: true}); err != nil || batch {
		t.Fatalf("single: batch=%v err=%v", batch, err)
	}
}

func TestDecodeError(t *testing.T) {
	m, err := DecodeMessage([]byte(`{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"bad \"x\"","data":[1,2]}}`), DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &ErrorObject{Code: -32602, Message: `bad "x"`, Data: json.RawMessage(`[1,2]`)}
	if !reflect.DeepEqual(m.Error, want) {
		t.Fatalf("Error = %+v", m.Error)
	}
}

func TestHelpers(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		wantName   string
		wantArgs   map[string]any
		wantMeta   map[string]any
		wantClient map[string]any
		wantVer    string
		wantIDText string
	}{
		{
			name:     "tools/call",
			body:     `{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{"arguments":{"n":5,"big":12345678901234567890,"f":1.5,"s":"x","l":[1,{"a":null}]},"name":"echo","_meta":{"progressToken":7}}}`,
			wantName: "echo",
			wantArgs: map[string]any{"n": int64(5), "big": 12345678901234567890.0, "f": 1.5, "s": "x", "l": []any{int64(1), map[string]any{"a": nil}}},
			wantMeta: map[string]any{"progressToken": int64(7)}, wantIDText: "r1",
		},
		{name: "escaped name", body: `{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"n\u0061me":"gr\u00e9et"}}`, wantName: "gréet", wantIDText: "2"},
		{name: "resources/read", body: `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a","name":"not this"}}`, wantName: "file:///a", wantIDText: "2"},
		{name: "resources/subscribe", body: `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"file:///b"}}`, wantName: "file:///b", wantIDText: "2"},
		{name: "name on other method", body: `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"name":"x"}}`, wantIDText: "2"},
		{name: "name not a string", body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":7}}`, wantIDText: "2"},
		{name: "nested name ignored", body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"x":{"name":"inner"},"name":"outer"}}`, wantName: "outer", wantIDText: "2"},
		{name: "array params", body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":["name"]}`, wantIDText: "2"},
		{
			name:       "initialize",
			body:       `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"node","version":"1.0"}}}`,
			wantClient: map[string]any{"name": "node", "version": "1.0"}, wantVer: "2025-11-25", wantIDText: "0",
		},
		{
			name:       "2026-07-28 meta",
			body:       `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"go","version":"1.8"}}}}`,
			wantName:   "echo",
			wantMeta:   map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": map[string]any{"name": "go", "version": "1.8"}},
			wantClient: map[string]any{"name": "go", "version": "1.8"}, wantVer: "2026-07-28", wantIDText: "1",
		},
		{name: "protocolVersion outside initialize ignored", body: `{"jsonrpc":"2.0","method":"notifications/x","params":{"protocolVersion":"2025-06-18"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeMessage([]byte(tt.body), DecodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Name(); got != tt.wantName {
				t.Errorf("Name = %q, want %q", got, tt.wantName)
			}
			if got := m.Arguments(); !reflect.DeepEqual(got, tt.wantArgs) {
				t.Errorf("Arguments = %#v, want %#v", got, tt.wantArgs)
			}
			if got := m.Meta(); !reflect.DeepEqual(got, tt.wantMeta) {
				t.Errorf("Meta = %#v, want %#v", got, tt.wantMeta)
			}
			if got := m.ClientInfo(); !reflect.DeepEqual(got, tt.wantClient) {
				t.Errorf("ClientInfo = %#v, want %#v", got, tt.wantClient)
			}
			if got := m.ProtocolVersion(); got != tt.wantVer {
				t.Errorf("ProtocolVersion = %q, want %q", got, tt.wantVer)
			}
			if got := m.IDText(); got != tt.wantIDText {
				t.Errorf("IDText = %q, want %q", got, tt.wantIDText)
			}
		})
	}
}

func TestEncodeError(t *testing.T) {
	tests := []struct {
		name string
		id   json.RawMessage
		data any
		want string
	}{
		{"number id", json.RawMessage(`7`), nil, `{"jsonrpc":"2.0","id":7,"error":{"code":-31001,"message":"denied <by> policy"}}`},
		{"id echoed byte for byte", json.RawMessage(`"a\u0062"`), map[string]string{"intermediary": "mcpintercept", "rule": "r&d"},
			`{"jsonrpc":"2.0","id":"a\u0062","error":{"code":-31001,"message":"denied <by> policy","data":{"intermediary":"mcpintercept","rule":"r&d"}}}`},
		{"no id", nil, nil, `{"jsonrpc":"2.0","id":null,"error":{"code":-31001,"message":"denied <by> policy"}}`},
		{"unmarshalable data left out", json.RawMessage(`1`), func() {}, `{"jsonrpc":"2.0","id":1,"error":{"code":-31001,"message":"denied <by> policy"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EncodeError(tt.id, -31001, "denied <by> policy", tt.data)
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			m, err := DecodeMessage(got, DecodeOptions{})
			if err != nil || m.Kind != KindError || string(m.ID) != string(tt.id) || m.Error.Code != -31001 {
				t.Fatalf("round trip: %v %+v", err, m)
			}
		})
	}
}

func TestManyKeysObject(t *testing.T) {
	// Past smallObject keys the duplicate check switches to a map; both paths must agree.
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"m","params":{`)
	for i := 0; i < 100; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + `":1`)
	}
	ok := b.String() + `}}`
	if _, err := DecodeMessage([]byte(ok), DecodeOptions{}); err != nil {
		t.Fatalf("100 distinct keys: %v", err)
	}
	if _, err := DecodeMessage([]byte(b.String()+`,"kaxx":2}}`), DecodeOptions{}); !errors.Is(err, ErrDuplicateKey) {
		t.Fatalf("late duplicate: %v", err)
	}
	if _, err := DecodeMessage([]byte(b.String()+`,"KAXX":2}}`), DecodeOptions{}); !errors.Is(err, ErrCaseVariantKey) {
		t.Fatalf("late case variant: %v", err)
	}
}

func TestJSONErrorOffset(t *testing.T) {
	body := `{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}`
	_, err := DecodeMessage([]byte(body), DecodeOptions{})
	var je *JSONError
	if !errors.As(err, &je) || je.Offset != strings.LastIndex(body, `"method"`) {
		t.Fatalf("err = %v", err)
	}
}

// TestDifferential holds the strict decoder to encoding/json on what it accepts: once the scan
// passed, a case-insensitive, last-wins peer reads the same method, id and params.
func TestDifferential(t *testing.T) {
	for _, body := range differentialCorpus {
		checkDifferential(t, []byte(body))
	}
}

var differentialCorpus = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":"b"}}}`,
	`{"jsonrpc":"2.0","id":"x\u00e9","method":"tools\/call","params":{"name":"\u65e5"}}`,
	`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1,"total":2e1}}`,
	`{"params":{"name":"n"},"method":"m","id":-1.5e-3,"jsonrpc":"2.0","other":{"Method":"inner, not the envelope"}}`,
	`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hi"}]}}`,
	`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
}

func checkDifferential(t *testing.T, body []byte) {
	t.Helper()
	m, err := DecodeMessage(body, DecodeOptions{})
	if err != nil {
		return
	}
	var std struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
		Result  json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body, &std); err != nil {
		t.Fatalf("encoding/json refuses what the strict decoder accepted: %v\n%q", err, body)
	}
	id := string(m.ID)
	if m.Kind == KindError && m.ID == nil {
		id = "null"
	}
	if std.JSONRPC != "2.0" || std.Method != m.Method || string(std.ID) != id ||
		string(std.Params) != string(m.Params) || string(std.Result) != string(m.Result) {
		t.Fatalf("differential on %q:\nstrict   method=%q id=%s params=%s result=%s\nencoding method=%q id=%s params=%s result=%s",
			body, m.Method, id, m.Params, m.Result, std.Method, std.ID, std.Params, std.Result)
	}
	if m.Method == "tools/call" {
		var p struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		}
		if len(m.Params) > 0 && m.Params[0] == '{' {
			if err := json.Unmarshal(m.Params, &p); err == nil && p.Name != m.Name() {
				t.Fatalf("differential on name in %q: strict %q, encoding/json %q", body, m.Name(), p.Name)
			}
		}
	}
}
