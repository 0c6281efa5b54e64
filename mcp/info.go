package mcp

// Kinds and transports a request is classified as.
const (
	KindMCP  = "mcp"
	KindHTTP = "http"

	TransportStreamable = "streamable-http"
	TransportSSEStream  = "sse-stream" // HTTP+SSE (2024-11-05): the GET that opens the stream
	TransportSSEPost    = "sse-post"   // HTTP+SSE: a POST to the endpoint the stream announced
)

// Info is what a request head says about MCP: its headers only, never its body. It holds no
// credential: Authorization is reduced to presence and scheme, the session id to a hash, and
// secret-bearing headers are left out of Headers, so it can be logged and handed to policy as is.
// Its MCP fields are the client's claim (see Version.ServerChecksHeaders).
type Info struct {
	Method, Path       string // HTTP method; path without query (PathOf)
	MCPMethod, MCPName string // Mcp-Method, Mcp-Name (decoded from =?base64?…?=, RedactURI applied)
	ProtocolVersion    string // MCP-Protocol-Version as sent
	SessionHash        string // first 12 hex chars of SHA-256 of Mcp-Session-Id; "" if absent
	Accept             string
	ContentType        string
	Origin             string
	AuthPresent        bool
	AuthScheme         string // a well-known scheme name ("Bearer"), "other", or ""; never the value
	// Headers maps lower-cased names to first values, for policy. Credentials never enter it.
	Headers   map[string]string
	Kind      string // KindMCP or KindHTTP
	Transport string // one of the Transport constants, or "" for plain HTTP
	// DupHeader names an MCP header that appeared more than once (servers disagree on which copy
	// counts); a strict route refuses such a request.
	DupHeader string
	// Err is set when a header MCP defines is invalid (an Mcp-Name whose =?base64?…?= form does
	// not decode); MCPName is then empty. A proxy must refuse such a request rather than let a
	// policy on names be evaded by an encoding the server reads differently.
	Err error
}

// Version is the request's MCP-Protocol-Version.
func (i *Info) Version() Version { return Version(i.ProtocolVersion) }

// infoKey is where SetInfo keeps a request's Info on its exchange.
type infoKey struct{}

// SetInfo stores info on an exchange (anything with Set(key, value), as the pipeline's exchange
// has) for InfoOf.
func SetInfo(x interface{ Set(key, val any) }, info *Info) { x.Set(infoKey{}, info) }

// InfoOf returns the Info SetInfo stored on the exchange; nil when no classifier ran (none in the
// stage list, or a head that could not be read).
func InfoOf(x interface{ Get(key any) any }) *Info {
	info, _ := x.Get(infoKey{}).(*Info)
	return info
}
