package mcp

// The MCP methods the appliance knows by name. Every package that acts on a method names it by
// one of these constants; the string literal lives here only. A version that adds a method adds
// its constant and its MethodSpec below (and, when it brings new protocol types, their member
// lists in members.go): nothing else.
const (
	MethodInitialize             = "initialize"
	MethodPing                   = "ping"
	MethodToolsList              = "tools/list"
	MethodToolsCall              = "tools/call"
	MethodPromptsList            = "prompts/list"
	MethodPromptsGet             = "prompts/get"
	MethodResourcesList          = "resources/list"
	MethodResourcesTemplatesList = "resources/templates/list"
	MethodResourcesRead          = "resources/read"
	MethodResourcesSubscribe     = "resources/subscribe"
	MethodResourcesUnsubscribe   = "resources/unsubscribe"
	MethodCompletionComplete     = "completion/complete"
	MethodLoggingSetLevel        = "logging/setLevel"
	MethodSamplingCreateMessage  = "sampling/createMessage"
	MethodElicitationCreate      = "elicitation/create"
	MethodRootsList              = "roots/list"
	MethodServerDiscover         = "server/discover"
	MethodSubscriptionsListen    = "subscriptions/listen"

	NotificationInitialized               = "notifications/initialized"
	NotificationCancelled                 = "notifications/cancelled"
	NotificationProgress                  = "notifications/progress"
	NotificationMessage                   = "notifications/message"
	NotificationElicitationComplete       = "notifications/elicitation/complete"
	NotificationResourcesUpdated          = "notifications/resources/updated"
	NotificationResourcesListChanged      = "notifications/resources/list_changed"
	NotificationPromptsListChanged        = "notifications/prompts/list_changed"
	NotificationToolsListChanged          = "notifications/tools/list_changed"
	NotificationRootsListChanged          = "notifications/roots/list_changed"
	NotificationSubscriptionsAcknowledged = "notifications/subscriptions/acknowledged"
)

// MethodSpec is what the appliance knows of one method besides its name.
type MethodSpec struct {
	// Params and Result name the protocol types (protocolSchema's) a peer decodes the params and
	// the result into; "" where the peers decode nothing.
	Params, Result string
	// Subject is the params member naming what a request acts on ("name", "uri"; "" for none):
	// Message.Name, policy's mcp.name.
	Subject string
	// Capability is the client capability a server→client request needs ("sampling",
	// "elicitation", "roots"); "" for the others.
	Capability string
	// ListChanged marks a server notification that a list changed (tools, prompts, resources).
	ListChanged bool
}

// Methods is every known method's MethodSpec. Only these are judged member by member: a custom
// method's params and result are its sender's own, decoded by nobody into a protocol struct, so
// "ID" or "Version" there is any key.
var Methods = map[string]MethodSpec{
	MethodInitialize:             {Params: "InitializeParams", Result: "InitializeResult"},
	NotificationInitialized:      {Params: "InitializedParams"},
	MethodPing:                   {Params: "PingParams"},
	MethodToolsList:              {Params: "ListToolsParams", Result: "ListToolsResult"},
	MethodToolsCall:              {Params: "CallToolParamsRaw", Result: "CallToolResult", Subject: "name"},
	MethodPromptsList:            {Params: "ListPromptsParams", Result: "ListPromptsResult"},
	MethodPromptsGet:             {Params: "GetPromptParams", Result: "GetPromptResult", Subject: "name"},
	MethodResourcesList:          {Params: "ListResourcesParams", Result: "ListResourcesResult"},
	MethodResourcesTemplatesList: {Params: "ListResourceTemplatesParams", Result: "ListResourceTemplatesResult"},
	MethodResourcesRead:          {Params: "ReadResourceParams", Result: "ReadResourceResult", Subject: "uri"},
	MethodResourcesSubscribe:     {Params: "SubscribeParams", Subject: "uri"},
	MethodResourcesUnsubscribe:   {Params: "UnsubscribeParams", Subject: "uri"},
	MethodCompletionComplete:     {Params: "CompleteParams", Result: "CompleteResult"},
	MethodLoggingSetLevel:        {Params: "SetLoggingLevelParams"},
	MethodSamplingCreateMessage:  {Params: "CreateMessageWithToolsParams", Result: "CreateMessageWithToolsResult", Capability: "sampling"},
	MethodElicitationCreate:      {Params: "ElicitParams", Result: "ElicitResult", Capability: "elicitation"},
	MethodRootsList:              {Params: "ListRootsParams", Result: "ListRootsResult", Capability: "roots"},
	MethodServerDiscover:         {Params: "DiscoverParams", Result: "DiscoverResult"},
	MethodSubscriptionsListen:    {Params: "SubscriptionsListenParams", Result: "SubscriptionsListenResult"},

	NotificationCancelled:                 {Params: "CancelledParams"},
	NotificationProgress:                  {Params: "ProgressNotificationParams"},
	NotificationMessage:                   {Params: "LoggingMessageParams"},
	NotificationElicitationComplete:       {Params: "ElicitationCompleteParams"},
	NotificationResourcesUpdated:          {Params: "ResourceUpdatedNotificationParams"},
	NotificationResourcesListChanged:      {Params: "ResourceListChangedParams", ListChanged: true},
	NotificationPromptsListChanged:        {Params: "PromptListChangedParams", ListChanged: true},
	NotificationToolsListChanged:          {Params: "ToolListChangedParams", ListChanged: true},
	NotificationRootsListChanged:          {Params: "RootsListChangedParams"},
	NotificationSubscriptionsAcknowledged: {Params: "SubscriptionsAcknowledgedParams"},
}

// SubjectOf is the params member naming what a method's request acts on ("" for none).
func SubjectOf(method string) string { return Methods[method].Subject }
