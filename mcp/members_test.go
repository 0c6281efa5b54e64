package mcp

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// sdkProtocolTypes are the Go SDK's params, results, content and error-data types; the walk
// reaches every struct they hold.
var sdkProtocolTypes = []any{
	sdkmcp.CallToolParamsRaw{}, sdkmcp.CallToolResult{}, sdkmcp.CancelledParams{}, sdkmcp.CompleteParams{}, sdkmcp.CompleteResult{},
	sdkmcp.CreateMessageParams{}, sdkmcp.CreateMessageWithToolsParams{}, sdkmcp.CreateMessageResult{}, sdkmcp.CreateMessageWithToolsResult{},
	sdkmcp.GetPromptParams{}, sdkmcp.GetPromptResult{}, sdkmcp.InitializeParams{}, sdkmcp.InitializeResult{}, sdkmcp.InitializedParams{},
	sdkmcp.ListPromptsParams{}, sdkmcp.DiscoverParams{}, sdkmcp.DiscoverResult{}, sdkmcp.ListPromptsResult{}, sdkmcp.ListResourceTemplatesParams{},
	sdkmcp.ListResourceTemplatesResult{}, sdkmcp.ListResourcesParams{}, sdkmcp.ListResourcesResult{}, sdkmcp.ListRootsParams{}, sdkmcp.ListRootsResult{},
	sdkmcp.ListToolsParams{}, sdkmcp.ListToolsResult{}, sdkmcp.LoggingMessageParams{}, sdkmcp.PingParams{}, sdkmcp.ProgressNotificationParams{},
	sdkmcp.PromptListChangedParams{}, sdkmcp.ReadResourceParams{}, sdkmcp.ReadResourceResult{}, sdkmcp.ResourceListChangedParams{},
	sdkmcp.RootsListChangedParams{}, sdkmcp.SetLoggingLevelParams{}, sdkmcp.ToolListChangedParams{}, sdkmcp.SubscribeParams{}, sdkmcp.UnsubscribeParams{},
	sdkmcp.ResourceUpdatedNotificationParams{}, sdkmcp.SubscriptionsListenParams{}, sdkmcp.SubscriptionsAcknowledgedParams{}, sdkmcp.SubscriptionsListenResult{},
	sdkmcp.ElicitParams{}, sdkmcp.ElicitResult{}, sdkmcp.ElicitationCompleteParams{}, sdkmcp.UnsupportedProtocolVersionData{},
	sdkmcp.MissingRequiredClientCapabilityData{}, sdkmcp.ResourceContents{}, sdkmcp.Annotations{},
}

// contentWireMembers are the members of the SDK's content blocks on the wire (its unexported
// wireContent: the exported content types carry no JSON tags).
var contentWireMembers = []string{"type", "text", "mimeType", "data", "resource", "uri", "name", "title",
	"description", "size", "_meta", "annotations", "icons", "id", "input", "toolUseId", "content",
	"structuredContent", "isError"}

// sdkMembers walks the Go SDK's protocol types and returns every JSON member name, and for each
// whether its value is free-form (a map or an interface: keys of the sender's) in some type.
func sdkMembers() (names map[string]bool, free map[string][]string) {
	names, free = map[string]bool{}, map[string][]string{}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		for i := 0; i < ty.NumField(); i++ {
			f := ty.Field(i)
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			if f.Anonymous && name == "" {
				walk(f.Type)
				continue
			}
			if name == "" {
				continue // an untagged content type: contentWireMembers has its wire names
			}
			names[name] = true
			e := f.Type
			for e.Kind() == reflect.Pointer || (e.Kind() == reflect.Slice && e.Elem().Kind() != reflect.Uint8) {
				e = e.Elem()
			}
			switch e.Kind() {
			case reflect.Map, reflect.Interface:
				free[name] = append(free[name], ty.Name()+"."+f.Name)
			case reflect.Struct:
				walk(e)
			}
		}
	}
	for _, r := range sdkProtocolTypes {
		walk(reflect.TypeOf(r))
	}
	for _, n := range contentWireMembers {
		names[n] = true
	}
	return names, free
}

// Every member name the Go SDK decodes is a protocol member, and every member whose value is a
// map or an interface in some SDK type is decoded free-form (typedChild) — or, for arguments and
// content, free-form when the value is an object, since the SDK has them as arrays of structs
// elsewhere.
func TestProtocolMembersCoverGoSDK(t *testing.T) {
	names, free := sdkMembers()
	for n := range names {
		if !FoldsToMember(n) || protocolFolded[string(AppendFolded(nil, []byte(n)))] != n {
			t.Errorf("Go SDK member %q is not in ProtocolMembers", n)
		}
	}
	for n, where := range free {
		switch n {
		case "inputRequests", "inputResponses":
			if typedChild([]byte(n), true) != ScopeIDMap {
				t.Errorf("%s (%v): not an id map", n, where)
			}
		case "arguments", "content":
			if typedChild([]byte(n), true) != ScopeNone || typedChild([]byte(n), false) != ScopeTyped {
				t.Errorf("%s (%v): want free as an object, typed as an array", n, where)
			}
		default:
			if typedChild([]byte(n), true) != ScopeNone {
				t.Errorf("%s (%v) is a map or an interface in the SDK, but its keys are watched", n, where)
			}
		}
	}
}

// Lone case variants of protocol members are refused wherever peers decode into structs, and
// left alone where the keys are the sender's (arguments, structuredContent, inputSchema, an
// elicitation's content, _meta, ids of inputRequests).
func TestCaseVariantMembersRefused(t *testing.T) {
	for _, c := range []struct {
		name, body string
		refused    bool
	}{
		{"result member", `{"jsonrpc":"2.0","id":1,"result":{"Tools":[]}}`, true},
		{"list entry", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"Name":"x"}]}}`, true},
		{"long s in a list entry", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x","deſcription":"d"}]}}`, true},
		{"result type", `{"jsonrpc":"2.0","id":1,"result":{"ResultType":"input_required"}}`, true},
		{"input request method", `{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{"a":{"Method":"sampling/createMessage","params":{}}}}}`, true},
		{"input request mode", `{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{"a":{"method":"elicitation/create","params":{"MODE":"url"}}}}}`, true},
		{"input response", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","inputResponses":{"a":{"Action":"accept"}}}}`, true},
		{"elicitation mode", `{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"Mode":"url"}}`, true},
		{"client info name", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"NAME":"x"}}}`, true},
		{"meta client info", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/clientInfo":{"Name":"x"}}}}`, true},
		{"capability", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"Sampling":{}}}}`, true},
		{"content block", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","Text":"x"}]}}`, true},
		{"error data elicitations", `{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"m","data":{"Elicitations":[]}}}`, true},
		{"error data elicitation url", `{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"m","data":{"elicitations":[{"URL":"x"}]}}}`, true},
		{"progress notification", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"Message":"x"}}`, true},
		{"arguments are the sender's", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"Name":"x","Type":1}}}`, false},
		{"structured content", `{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"Name":"x"}}}`, false},
		{"input schema", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","inputSchema":{"properties":{"Name":{}}}}]}}`, false},
		{"elicitation result content", `{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"Name":"x"}}}`, false},
		{"meta", `{"jsonrpc":"2.0","id":1,"result":{"_meta":{"Name":"x"}}}`, false},
		{"input request ids", `{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{"Method":{"method":"roots/list"}}}}`, false},
		{"other error data", `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m","data":{"Name":"x"}}}`, false},
		{"unknown member's value", `{"jsonrpc":"2.0","id":1,"result":{"x-vendor":{"Name":"x"}}}`, false},
		{"exact spellings", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x","description":"d","inputSchema":{"type":"object"}}],"nextCursor":"c"}}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Decode([]byte(c.body), DecodeOptions{})
			if c.refused && !errors.Is(err, ErrCaseVariantKey) {
				t.Fatalf("Decode: %v, want ErrCaseVariantKey", err)
			}
			if !c.refused && err != nil {
				t.Fatalf("Decode: %v, want nil", err)
			}
		})
	}
}
