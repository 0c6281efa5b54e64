package mcp

// Protocol member names. A peer that decodes a message into its protocol structs with a
// case-insensitive decoder (Go's encoding/json: the Go SDK for an input_required result's
// inputRequests, a retry's inputResponses and an error's data; Go peers that use it throughout)
// reads "Method", "MODE" or "toolſ" as method, mode and tools, while Level 2 reads members by
// their exact keys. So in the objects peers decode into structs (params, a result, and the
// struct-valued members within them: ScopeParams, ScopeTyped) a lone key that folds to one of
// these names but is spelt otherwise is refused, as two fold-equal keys of one object are.
//
// The list is every JSON member name of the MCP types of the Go SDK (its protocol, content and
// multi round-trip types; TestProtocolMembersCoverGoSDK checks it against them by reflection),
// with the JSON-RPC envelope's and a few of the 2026-07-28 schema's.
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
