package mcp

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
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
		method     string // of the request a response answers
	}{
		{"result member", `{"jsonrpc":"2.0","id":1,"result":{"Tools":[]}}`, true, "tools/list"},
		{"list entry", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"Name":"x"}]}}`, true, "tools/list"},
		{"long s in a list entry", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x","deſcription":"d"}]}}`, true, "tools/list"},
		{"result type", `{"jsonrpc":"2.0","id":1,"result":{"ResultType":"input_required"}}`, true, "tools/call"},
		{"input request method", `{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{"a":{"Method":"sampling/createMessage","params":{}}}}}`, true, "tools/call"},
		{"input request mode", `{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{"a":{"method":"elicitation/create","params":{"MODE":"url"}}}}}`, true, "tools/call"},
		{"input response", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","inputResponses":{"a":{"Action":"accept"}}}}`, true, ""},
		{"elicitation mode", `{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"Mode":"url"}}`, true, ""},
		{"client info name", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"NAME":"x"}}}`, true, ""},
		{"meta client info", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/clientInfo":{"Name":"x"}}}}`, true, ""},
		{"capability", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"Sampling":{}}}}`, true, ""},
		{"content block", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","Text":"x"}]}}`, true, "tools/call"},
		{"error data elicitations", `{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"m","data":{"Elicitations":[]}}}`, true, ""},
		{"error data elicitation url", `{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"m","data":{"elicitations":[{"URL":"x"}]}}}`, true, ""},
		{"progress notification", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"Message":"x"}}`, true, ""},
		{"arguments are the sender's", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"Name":"x","Type":1}}}`, false, ""},
		{"structured content", `{"jsonrpc":"2.0","id":1,"result":{"structuredContent":{"Name":"x"}}}`, false, "tools/call"},
		{"input schema", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","inputSchema":{"properties":{"Name":{}}}}]}}`, false, "tools/list"},
		{"elicitation result content", `{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"Name":"x"}}}`, false, "elicitation/create"},
		{"meta", `{"jsonrpc":"2.0","id":1,"result":{"_meta":{"Name":"x"}}}`, false, "tools/call"},
		{"input request ids", `{"jsonrpc":"2.0","id":1,"result":{"inputRequests":{"Method":{"method":"roots/list"}}}}`, false, "tools/call"},
		{"other error data", `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m","data":{"Name":"x"}}}`, false, ""},
		{"unknown member's value", `{"jsonrpc":"2.0","id":1,"result":{"x-vendor":{"Name":"x"}}}`, false, "tools/call"},
		{"exact spellings", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x","description":"d","inputSchema":{"type":"object"}}],"nextCursor":"c"}}`, false, "tools/list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs, _, err := Decode([]byte(c.body), DecodeOptions{})
			if err == nil {
				err = msgs[0].CheckResult(c.method)
			}
			if c.refused && !errors.Is(err, ErrCaseVariantKey) {
				t.Fatalf("Decode: %v, want ErrCaseVariantKey", err)
			}
			if !c.refused && err != nil {
				t.Fatalf("Decode: %v, want nil", err)
			}
		})
	}
}

// sdkRoots are the Go SDK's types of the params and results of Methods, by name.
var sdkRoots = func() map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for _, v := range append(sdkProtocolTypes, sdkmcp.ListRootsParams{}) {
		m[reflect.TypeOf(v).Name()] = reflect.TypeOf(v)
	}
	return m
}()

// goSDKSchema renders the Go SDK's protocol types as protocolSchema does: every struct its
// params and results hold, member by member, with how each holds structs. Content (an
// interface, decoded through the SDK's wire form) and the input request and response maps (an
// interface per entry, by method) are written out from what the SDK's decoders read.
func goSDKSchema(t *testing.T) string {
	contentIface := reflect.TypeOf((*sdkmcp.Content)(nil)).Elem()
	types := map[string]map[string]string{}
	var walk func(ty reflect.Type, name string) string
	shapeOf := func(ft reflect.Type, name string) string {
		e := ft
		for e.Kind() == reflect.Pointer {
			e = e.Elem()
		}
		switch {
		case e.Name() == "InputRequestMap":
			return ":{InputRequest}"
		case e.Name() == "InputResponseMap":
			return ":{InputResponse}"
		case e == contentIface || (e.Kind() == reflect.Slice && e.Elem() == contentIface):
			return ":~Content"
		case e.Kind() == reflect.Struct:
			return ":" + walk(e, name)
		case e.Kind() == reflect.Slice && e.Elem().Kind() != reflect.Uint8:
			el := e.Elem()
			for el.Kind() == reflect.Pointer {
				el = el.Elem()
			}
			if el.Kind() == reflect.Struct {
				return ":[" + walk(el, name) + "]"
			}
		}
		return ""
	}
	var fields func(ty reflect.Type, tname string, into map[string]string)
	fields = func(ty reflect.Type, tname string, into map[string]string) {
		for i := 0; i < ty.NumField(); i++ {
			f := ty.Field(i)
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			if f.Anonymous && name == "" {
				e := f.Type
				for e.Kind() == reflect.Pointer {
					e = e.Elem()
				}
				fields(e, tname, into)
				continue
			}
			if name == "" {
				continue
			}
			// An anonymous struct is named after where it is (ClientCapabilities.roots).
			into[name] = shapeOf(f.Type, tname+"."+name)
		}
	}
	walk = func(ty reflect.Type, name string) string {
		if ty.Name() != "" {
			name = ty.Name()
		}
		if _, ok := types[name]; ok {
			return name
		}
		m := map[string]string{}
		types[name] = m
		fields(ty, name, m)
		return name
	}
	merge := func(name string, of ...string) {
		m := map[string]string{}
		for _, o := range of {
			for k, v := range types[o] {
				if old, ok := m[k]; ok && old != v {
					v = "" // held differently by the types merged: left free
				}
				m[k] = v
			}
		}
		types[name] = m
	}
	for _, spec := range Methods {
		pr := [2]string{spec.Params, spec.Result}
		for _, n := range pr {
			if n == "" {
				continue
			}
			ty, ok := sdkRoots[n]
			if !ok {
				t.Fatalf("Methods names %s, which is not a Go SDK type here", n)
			}
			walk(ty, n)
			if n == pr[1] {
				// Every result may say it is input_required (2026-07-28); the SDK reads
				// resultType into an unexported field of some results.
				types[n]["resultType"] = ""
			}
		}
	}
	content := map[string]string{}
	for _, n := range contentWireMembers {
		content[n] = ""
	}
	content["resource"] = ":" + walk(reflect.TypeOf(sdkmcp.ResourceContents{}), "")
	content["annotations"] = ":" + walk(reflect.TypeOf(sdkmcp.Annotations{}), "")
	content["icons"] = ":[" + walk(reflect.TypeOf(sdkmcp.Icon{}), "") + "]"
	content["content"] = ":~Content"
	types["Content"] = content
	for _, r := range []any{sdkmcp.CreateMessageWithToolsParams{}, sdkmcp.ElicitParams{}, sdkmcp.ListRootsParams{},
		sdkmcp.CreateMessageWithToolsResult{}, sdkmcp.ElicitResult{}, sdkmcp.ListRootsResult{}} {
		walk(reflect.TypeOf(r), "")
	}
	merge("InputRequestParams", "CreateMessageWithToolsParams", "ElicitParams", "ListRootsParams")
	types["InputRequest"] = map[string]string{"method": "", "params": ":InputRequestParams"}
	merge("InputResponse", "CreateMessageWithToolsResult", "ElicitResult", "ListRootsResult")
	var names []string
	for n := range types {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("\n")
	for _, n := range names {
		var ms []string
		for k, v := range types[n] {
			ms = append(ms, k+v)
		}
		sort.Strings(ms)
		fmt.Fprintf(&b, "%s: %s\n", n, strings.Join(ms, " "))
	}
	return b.String()
}

// The schema the decoder judges params and results by is the Go SDK's, struct by struct.
func TestProtocolSchemaIsGoSDKs(t *testing.T) {
	if got := goSDKSchema(t); got != protocolSchema {
		t.Errorf("protocolSchema differs from the Go SDK's types; want:\n%s", got)
	}
	// The scan looks for lone case variants of ProtocolMembers before it judges a value by
	// its types: a member name missing there would never be looked for.
	for _, ty := range protocolTypes {
		for n := range ty.members {
			if !protocolExact[n] {
				t.Errorf("%s.%s is not in ProtocolMembers", ty.name, n)
			}
		}
	}
	for method, spec := range Methods {
		for _, n := range [2]string{spec.Params, spec.Result} {
			if n != "" && len(protocolTypes[n].members) == 0 {
				t.Errorf("%s: type %s has no members", method, n)
			}
		}
	}
}

// A lone case variant is refused only where a peer decodes into a protocol struct that has the
// member: in an MCP method's params and in the result of an MCP method, by that type's own
// members. A custom method's params and results are the sender's (a Go server's untagged
// struct sends "ID", "URL", "Version"), and so is a key that is no member of the type at hand.
func TestCaseVariantCustomMethods(t *testing.T) {
	for _, c := range []struct {
		name, method, body string
		refused            bool
	}{
		{"vendor result", "vendor/x", `{"jsonrpc":"2.0","id":1,"result":{"ID":"abc","URL":"https://x","Size":3}}`, false},
		{"vendor result version", "vendor/x", `{"jsonrpc":"2.0","id":1,"result":{"Version":"1","Tools":[{"Name":"x"}]}}`, false},
		{"vendor request", "", `{"jsonrpc":"2.0","id":1,"method":"vendor/x","params":{"ID":1,"URL":"u","Mode":"m"}}`, false},
		{"vendor notification", "", `{"jsonrpc":"2.0","method":"notifications/vendor","params":{"Message":"x"}}`, false},
		{"call result metadata", "tools/call", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}],"Metadata":{"a":1}}}`, false},
		{"list result id", "tools/list", `{"jsonrpc":"2.0","id":1,"result":{"tools":[],"ID":1}}`, false},
		{"tool entry url", "tools/list", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t","URL":"u"}]}}`, false},
		{"progress id", "", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"ID":"x"}}`, false},
		{"content block title", "tools/call", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi","Title":"x"}]}}`, true},
		{"list result tools", "tools/list", `{"jsonrpc":"2.0","id":1,"result":{"Tools":[]}}`, true},
		{"initialize server info", "initialize", `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","serverInfo":{"name":"s","Version":"1"}}}`, true},
		{"sampling content", "sampling/createMessage", `{"jsonrpc":"2.0","id":1,"result":{"role":"assistant","model":"m","content":{"type":"text","TEXT":"x"}}}`, true},
		{"elicitation params", "", `{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"message":"m","URL":"https://evil.test"}}`, true},
		{"progress message", "", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"Message":"x"}}`, true},
		{"retry input response", "", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","inputResponses":{"a":{"Action":"accept"}}}}`, true},
		{"input request params", "tools/call", `{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create","params":{"Url":"u"}}}}}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs, _, err := Decode([]byte(c.body), DecodeOptions{})
			if err == nil {
				err = msgs[0].CheckResult(c.method)
			}
			if c.refused && !errors.Is(err, ErrCaseVariantKey) {
				t.Fatalf("got %v, want ErrCaseVariantKey", err)
			}
			if !c.refused && err != nil {
				t.Fatalf("got %v, want nil", err)
			}
		})
	}
}
