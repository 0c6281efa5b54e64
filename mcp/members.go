package mcp

import (
	"fmt"
	"strings"
)

// Protocol member names. A peer that decodes a message into its protocol structs with a
// case-insensitive decoder (Go's encoding/json: the Go SDK for an input_required result's
// inputRequests, a retry's inputResponses and an error's data; Go peers that use it throughout)
// reads "Method", "MODE" or "toolſ" as method, mode and tools, while Level 2 reads members by
// their exact keys. So in the objects peers decode into protocol structs a lone key that folds
// to a member name of that struct but is spelt otherwise is refused, as two fold-equal keys of
// one object are: an MCP method's params and the structs they hold by their types
// (protocolSchema, in Decode), a result by the type of its request's method
// (Message.CheckResult), and the client info and capabilities of _meta and an error's URL
// elicitations (ScopeTyped) by this list. A custom method's params and result are the sender's
// own: nobody decodes them into a protocol struct, and "ID" or "Version" there is any key.
//
// The list is every JSON member name of the MCP types of the Go SDK (its protocol, content and
// multi round-trip types; TestProtocolMembersCoverGoSDK checks it against them by reflection),
// with the JSON-RPC envelope's and a few of the 2026-07-28 schema's. The scan looks for case
// variants of these first, and walks params or a result by its types only when it saw one.
var ProtocolMembers = []string{
	// JSON-RPC
	"jsonrpc", "id", "method", "params", "result", "error", "code", "message", "data",
	// MCP
	"_meta", "action", "annotations", "argument", "arguments", "audience", "blob", "cacheScope",
	"capabilities", "clientInfo", "completion", "completions", "content", "contents", "context",
	"costPriority", "cursor", "description", "destructiveHint", "elicitation", "elicitationId",
	"elicitations", "experimental", "extensions", "form", "hasMore", "hints", "icons",
	"idempotentHint", "includeContext", "input", "inputRequests", "inputResponses", "inputSchema",
	"instructions", "intelligencePriority", "isError", "lastModified", "level", "listChanged",
	"logger", "logging", "maxTokens", "messages", "metadata", "mimeType", "mode", "model",
	"modelPreferences", "name", "nextCursor", "notifications", "openWorldHint", "outputSchema",
	"priority", "progress", "progressToken", "prompts", "promptsListChanged", "protocolVersion",
	"readOnlyHint", "reason", "ref", "requestId", "requestState", "requested", "requestedSchema",
	"required", "requiredCapabilities", "resource", "resourceSubscriptions", "resourceTemplates",
	"resources", "resourcesListChanged", "resultType", "role", "roots", "sampling", "serverInfo",
	"size", "sizes", "speedPriority", "src", "stopReason", "stopSequences", "structuredContent",
	"subscribe", "supported", "supportedVersions", "systemPrompt", "task", "tasks", "temperature",
	"text", "theme", "title", "toolChoice", "toolUseId", "tools", "toolsListChanged", "total",
	"ttlMs", "type", "uri", "uriTemplate", "url", "value", "values", "version", "websiteUrl",
}

// protocolFolded maps the folded form of every protocol member name to the name.
var protocolFolded = func() map[string]string {
	m := make(map[string]string, len(ProtocolMembers))
	for _, n := range ProtocolMembers {
		m[string(AppendFolded(nil, []byte(n)))] = n
	}
	return m
}()

// protocolExact holds the protocol member names as spelt.
var protocolExact = func() map[string]bool {
	m := make(map[string]bool, len(ProtocolMembers))
	for _, n := range ProtocolMembers {
		m[n] = true
	}
	return m
}()

// FoldsToMember reports whether key folds equal to a protocol member name, spelt that way or
// not: a rewriter that makes up a key (redaction's markers) must not make one, or the message
// it writes is refused (or, spelt exactly, means something else).
func FoldsToMember(key string) bool {
	_, ok := protocolFolded[string(AppendFolded(nil, []byte(key)))]
	return ok
}

// objType is one protocol struct: its members by exact name, with the type of the structs a
// member holds (nil: a scalar or a free-form value, whose keys are the sender's), and its member
// names by their folded form.
type objType struct {
	name    string
	members map[string]*memberType
	folded  map[string]string
}

// memberType is how a member holds structs: shape is ':' (one struct), '[' (an array of them),
// '~' (one or an array: content) or '{' (an object of them keyed by the sender's ids).
type memberType struct {
	shape byte
	t     *objType
}

// clientResultType is the type of the results a client sends a server: those of the requests a
// server sends a client, merged (a member two of them hold differently is left free).
const clientResultType = "InputResponse"

// protocolTypes is protocolSchema parsed: the member names of each struct, per struct.
var protocolTypes = parseSchema(protocolSchema)

func parseSchema(text string) map[string]*objType {
	types := map[string]*objType{}
	get := func(n string) *objType {
		if types[n] == nil {
			types[n] = &objType{name: n, members: map[string]*memberType{}, folded: map[string]string{}}
		}
		return types[n]
	}
	for _, line := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		t := get(name)
		for _, f := range strings.Fields(rest) {
			m, child, _ := strings.Cut(f, ":")
			var mt *memberType
			if child != "" {
				shape := byte(':')
				switch child[0] {
				case '[', '~', '{':
					shape, child = child[0], strings.Trim(child, "[]~{}")
				}
				mt = &memberType{shape: shape, t: get(child)}
			}
			t.members[m] = mt
			t.folded[string(AppendFolded(nil, []byte(m)))] = m
		}
	}
	return types
}

// ParamsType and ResultType report whether method is an MCP method whose params (result) the
// peers decode into a protocol struct.
func paramsType(method string) *objType { return protocolTypes[Methods[method].Params] }
func resultType(method string) *objType { return protocolTypes[Methods[method].Result] }

// checkTyped refuses, in the validated JSON value v (at offset base of the body) that a peer
// decodes into t, a key that folds to one of t's member names but is spelt otherwise, and
// likewise in the structs its members hold.
func checkTyped(v []byte, base int, t *objType) error {
	if t == nil || len(v) == 0 || v[0] != '{' {
		return nil
	}
	i := SkipSpace(v, 1)
	for i < len(v) && v[i] == '"' {
		ke := SkipString(v, i)
		key := Unquote(v[i:ke])
		if m, ok := t.folded[string(AppendFolded(nil, []byte(key)))]; ok && m != key {
			return &JSONError{Offset: base + i, Err: ErrCaseVariantKey, Detail: fmt.Sprintf("%q is not the member %q of %s", key, m, t.name)}
		}
		vs := SkipSpace(v, SkipSpace(v, ke)+1)
		ve := SkipValue(v, vs)
		if mt := t.members[key]; mt != nil {
			if err := checkMember(v[vs:ve], base+vs, mt); err != nil {
				return err
			}
		}
		i = SkipSpace(v, ve)
		if i >= len(v) || v[i] != ',' {
			break
		}
		i = SkipSpace(v, i+1)
	}
	return nil
}

func checkMember(v []byte, base int, mt *memberType) error {
	switch {
	case v[0] == '{' && mt.shape == '{':
		i := SkipSpace(v, 1)
		for i < len(v) && v[i] == '"' {
			vs := SkipSpace(v, SkipSpace(v, SkipString(v, i))+1)
			ve := SkipValue(v, vs)
			if err := checkTyped(v[vs:ve], base+vs, mt.t); err != nil {
				return err
			}
			i = SkipSpace(v, ve)
			if i >= len(v) || v[i] != ',' {
				break
			}
			i = SkipSpace(v, i+1)
		}
	case v[0] == '{' && (mt.shape == ':' || mt.shape == '~'):
		return checkTyped(v, base, mt.t)
	case v[0] == '[' && (mt.shape == '[' || mt.shape == '~'):
		for _, e := range Elements(v) {
			if err := checkTyped(v[e[0]:e[1]], base+e[0], mt.t); err != nil {
				return err
			}
		}
	}
	return nil
}

// protocolSchema is every struct the peers decode params and results into, as the Go SDK has
// them (generated from its types by TestProtocolSchemaIsGoSDKs, which fails when they differ):
// "Type: member member:Struct member:[ArrayOfStruct] member:~StructOrArray member:{IDMap}".
const protocolSchema = `
Annotations: audience lastModified priority
CallToolParamsRaw: _meta arguments inputResponses:{InputResponse} name requestState
CallToolResult: _meta content:~Content inputRequests:{InputRequest} isError requestState resultType structuredContent
CancelledParams: _meta reason requestId
ClientCapabilities: elicitation:ElicitationCapabilities experimental extensions roots:ClientCapabilities.roots sampling:SamplingCapabilities
ClientCapabilities.roots: listChanged
CompleteContext: arguments
CompleteParams: _meta argument:CompleteParamsArgument context:CompleteContext ref:CompleteReference
CompleteParamsArgument: name value
CompleteReference: name type uri
CompleteResult: _meta completion:CompletionResultDetails resultType
CompletionCapabilities: 
CompletionResultDetails: hasMore total values
Content: _meta annotations:Annotations content:~Content data description icons:[Icon] id input isError mimeType name resource:ResourceContents size structuredContent text title toolUseId type uri
CreateMessageWithToolsParams: _meta includeContext maxTokens messages:[SamplingMessageV2] metadata modelPreferences:ModelPreferences stopSequences systemPrompt temperature toolChoice:ToolChoice tools:[Tool]
CreateMessageWithToolsResult: _meta content:~Content model resultType role stopReason
DiscoverParams: _meta
DiscoverResult: _meta cacheScope capabilities:ServerCapabilities instructions resultType supportedVersions ttlMs
ElicitParams: _meta elicitationId message mode requestedSchema url
ElicitResult: _meta action content resultType
ElicitationCapabilities: form:FormElicitationCapabilities url:URLElicitationCapabilities
ElicitationCompleteParams: _meta elicitationId
FormElicitationCapabilities: 
GetPromptParams: _meta arguments inputResponses:{InputResponse} name requestState
GetPromptResult: _meta description inputRequests:{InputRequest} messages:[PromptMessage] requestState resultType
Icon: mimeType sizes src theme
Implementation: description icons:[Icon] name title version websiteUrl
InitializeParams: _meta capabilities:ClientCapabilities clientInfo:Implementation protocolVersion
InitializeResult: _meta capabilities:ServerCapabilities instructions protocolVersion resultType serverInfo:Implementation
InitializedParams: _meta
InputRequest: method params:InputRequestParams
InputRequestParams: _meta elicitationId includeContext maxTokens message messages:[SamplingMessageV2] metadata mode modelPreferences:ModelPreferences requestedSchema stopSequences systemPrompt temperature toolChoice:ToolChoice tools:[Tool] url
InputResponse: _meta action content model resultType role roots:[Root] stopReason
ListPromptsParams: _meta cursor
ListPromptsResult: _meta cacheScope nextCursor prompts:[Prompt] resultType ttlMs
ListResourceTemplatesParams: _meta cursor
ListResourceTemplatesResult: _meta cacheScope nextCursor resourceTemplates:[ResourceTemplate] resultType ttlMs
ListResourcesParams: _meta cursor
ListResourcesResult: _meta cacheScope nextCursor resources:[Resource] resultType ttlMs
ListRootsParams: _meta
ListRootsResult: _meta resultType roots:[Root]
ListToolsParams: _meta cursor
ListToolsResult: _meta cacheScope nextCursor resultType tools:[Tool] ttlMs
LoggingCapabilities: 
LoggingMessageParams: _meta data level logger
ModelHint: name
ModelPreferences: costPriority hints:[ModelHint] intelligencePriority speedPriority
NotificationSubscriptions: promptsListChanged resourceSubscriptions resourcesListChanged toolsListChanged
PingParams: _meta
ProgressNotificationParams: _meta message progress progressToken total
Prompt: _meta arguments:[PromptArgument] description icons:[Icon] name title
PromptArgument: description name required title
PromptCapabilities: listChanged
PromptListChangedParams: _meta
PromptMessage: content:~Content role
ReadResourceParams: _meta inputResponses:{InputResponse} requestState uri
ReadResourceResult: _meta cacheScope contents:[ResourceContents] inputRequests:{InputRequest} requestState resultType ttlMs
Resource: _meta annotations:Annotations description icons:[Icon] mimeType name size title uri
ResourceCapabilities: listChanged subscribe
ResourceContents: _meta blob mimeType text uri
ResourceListChangedParams: _meta
ResourceTemplate: _meta annotations:Annotations description icons:[Icon] mimeType name title uriTemplate
ResourceUpdatedNotificationParams: _meta uri
Root: _meta name uri
RootsListChangedParams: _meta
SamplingCapabilities: context:SamplingContextCapabilities tools:SamplingToolsCapabilities
SamplingContextCapabilities: 
SamplingMessageV2: content:~Content role
SamplingToolsCapabilities: 
ServerCapabilities: completions:CompletionCapabilities experimental extensions logging:LoggingCapabilities prompts:PromptCapabilities resources:ResourceCapabilities tools:ToolCapabilities
SetLoggingLevelParams: _meta level
SubscribeParams: _meta uri
SubscriptionsAcknowledgedParams: _meta notifications:NotificationSubscriptions
SubscriptionsListenParams: _meta notifications:NotificationSubscriptions
SubscriptionsListenResult: _meta resultType
Tool: _meta annotations:ToolAnnotations description icons:[Icon] inputSchema name outputSchema title
ToolAnnotations: destructiveHint idempotentHint openWorldHint readOnlyHint title
ToolCapabilities: listChanged
ToolChoice: mode
ToolListChangedParams: _meta
URLElicitationCapabilities: 
UnsubscribeParams: _meta uri
`
