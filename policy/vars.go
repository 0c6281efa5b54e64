package policy

import (
	"sync"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// Level is an awareness level: how much of a flow a route lets the appliance see, and so which
// fields of the rule variables can be present when its rule set is evaluated.
type Level int

// The awareness levels.
const (
	// LevelConn sees the connection only (opaque and passthrough routes): client.* and conn.*.
	LevelConn Level = 0
	// LevelHeaders adds the HTTP request head: http.* and the MCP fields headers carry.
	LevelHeaders Level = 1
	// LevelBody adds the JSON-RPC messages: every mcp.* field.
	LevelBody Level = 2
)

// Vars are the typed facts of one evaluation, one struct per CEL variable. A nil pointer is a
// variable the caller cannot know at its level: every field of it is absent. The caller owns the
// structs; Evaluate only reads them, so a flow's Client and Conn are built once and shared by
// every evaluation of the flow, and a Message can be reused from one message to the next.
type Vars struct {
	Client *Client
	Conn   *Conn
	HTTP   *Request
	MCP    *Message
	Auth   *Auth
	// Downstream is the federation route of the call or list entry being judged; nil outside a
	// federation (aggregate endpoint) evaluation leaves every downstream.* field absent.
	Downstream *Downstream
	// Unknown names fields ("mcp.client_info") that exist for this message but whose value the
	// caller cannot establish: Level 2 cannot tell which client a server→client request goes to.
	// A rule that reads one (has() included) fails to evaluate (Input.FailOpen decides), where an
	// absent field only makes it not match.
	Unknown []string
}

// Auth is the `auth` variable: the credential a request carried, as the appliance's token check
// read it (Level 1 and 2). It never holds the token itself, so no rule can leak it.
type Auth struct {
	Present  bool   // an Authorization header was sent
	Scheme   string // lower-cased: bearer, basic, ...
	Verified bool   // the token's signature was checked against a configured issuer
	Claims   Claims
}

// Downstream is the `downstream` variable: where the aggregate endpoint of a federation routes a
// call or a list entry (Level 2). mcp.name stays the aggregate name the client sent
// ("files.read"); ID and Tool are what the appliance's route table maps it to. A field is absent
// when empty.
type Downstream struct {
	// ID is the configured id of the downstream server the registry routes the name to ("files").
	// It comes from the appliance's own route table: the client's name is only looked up there,
	// never split.
	ID string
	// Tool is the tool's name as the downstream itself lists it in its tools/list ("read").
	Tool string
}

// Claims is auth.claims: those of a JWT (or of an introspected opaque token). A string field is
// absent when empty, as a claim the token did not carry.
type Claims struct {
	Iss, Sub, Azp, ClientID, Scope string
	Aud                            []string
}

// AuthKey is the exchange key under which the token check keeps a request's *Auth for the
// stages that fill Vars after it.
type AuthKey struct{}

// AuthFrom is the *Auth kept under AuthKey (nil: the route checks no token, so auth is absent).
func AuthFrom(v any) *Auth {
	a, _ := v.(*Auth)
	return a
}

// Caller is the caller's identity as records carry it: the iss and sub claims of the request's
// token, each "sha256:<hex>" under tokens.record_identity: hash, and both "" when the token
// carried none or records leave them out (off). It is never the token.
type Caller struct {
	Iss, Sub string
}

// CallerKey is the exchange key under which the token check keeps a request's Caller for the
// stages that write records.
type CallerKey struct{}

// CallerFrom is the Caller kept under CallerKey (zero: no token, or none read).
func CallerFrom(v any) Caller {
	c, _ := v.(Caller)
	return c
}

// Credential is what records say of the credential a request goes upstream with on a
// credentials route: Added is injected or exchanged, Source the file or token endpoint. Never the
// value.
type Credential struct {
	Added, Source string
}

// CredentialKey is the exchange key under which the credentials stage keeps a request's
// Credential for the stages that write records.
type CredentialKey struct{}

// CredentialFrom is the Credential kept under CredentialKey (zero: the route adds none).
func CredentialFrom(v any) Credential {
	c, _ := v.(Credential)
	return c
}

// Client is the `client` variable: the peer that opened the flow.
type Client struct {
	Address string // IP, without port
	Port    uint16
	// Process is the local process that opened the flow, when the mechanism knows it (eBPF);
	// nil leaves client.pid, uid, gid, comm, exe and cgroup absent.
	Process *Process
	// Pod is the Kubernetes pod the flow came from, when the node agent steered it; nil leaves
	// client.pod absent.
	Pod *Pod
}

// Pod is client.pod: the pod a flow came from (node agent). Build it once per pod and share it
// by every flow: the CEL map of its labels is made on first use and kept.
type Pod struct {
	Namespace, Name, UID, ServiceAccount string
	Labels                               map[string]string

	labelsOnce sync.Once
	labelsVal  ref.Val
}

func (p *Pod) labels() ref.Val {
	p.labelsOnce.Do(func() {
		m := p.Labels
		if m == nil {
			m = map[string]string{}
		}
		p.labelsVal = types.NewStringStringMap(types.DefaultTypeAdapter, m)
	})
	return p.labelsVal
}

// Process is the identity of a local client process.
type Process struct {
	PID, UID, GID uint32
	Comm, Exe     string
	Cgroup        uint64
}

// Conn is the `conn` variable: where the flow was going and how it is treated.
type Conn struct {
	OrigDst   string // IP:port as net.JoinHostPort writes it
	OrigIP    string
	OrigPort  uint16
	Mechanism string // the steering mechanism's name
	TLS       string // passthrough, terminate or plaintext
	// Hello says the flow opened with a TLS ClientHello, so conn.sni is present, empty when the
	// hello named no server; without a hello conn.sni is absent.
	Hello bool
	SNI   string
	// Credential is the route's credentials action, inject or exchange ("" none: absent), set by
	// the credentials stage's factory: the route's, never the request's.
	Credential string
}

// Request is the `http` variable: the request head (Level 1 and 2).
type Request struct {
	Method, Path string // path without query
	// Headers is read only when a rule reads http.headers; nil leaves it absent.
	Headers HeaderSource
}

// HeaderSource produces the request's headers for rules: lower-case names, first values, no
// credential. It is asked at most once per evaluation, and only when a rule reads http.headers.
type HeaderSource interface {
	HeaderMap() map[string]string
}

// HeaderMap is a HeaderSource for headers already collected.
type HeaderMap map[string]string

// HeaderMap returns m; a nil m is an empty map, present: a request whose classification kept
// no header still has http.headers, as it always had.
func (m HeaderMap) HeaderMap() map[string]string {
	if m == nil {
		return noHeaders
	}
	return m
}

var noHeaders = map[string]string{}

// Message is the `mcp` variable: the MCP facts of a request (Level 1, from its headers) or of a
// JSON-RPC message (Level 2, from its body). A string field is absent when empty, as a header the
// client did not send is: rules tell "no method" from any method.
type Message struct {
	Version, Method, Name, Session string    // Level 1 and 2
	ID                             string    // the JSON-RPC id, as text
	Direction                      string    // client_to_server or server_to_client
	Kind                           string    // request, notification, response or error
	Tool                           string    // a server→client request: the tool whose call it belongs to
	Mode                           string    // an elicitation's mode
	Retry                          bool      // a request repeated with its input responses; absent when false
	Error                          *RPCError // a JSON-RPC error response; nil when absent
	// Tools is what tool integrity knows of the definition a tools/call or prompts/get names, or
	// of the listed tool, prompt or template a list probe judges (mcp.tool_findings,
	// tool_pinned, tool_changed). Level 2 sets it, zero on a route without tool_pins, on every
	// such message and probe; nil (other messages, Level 1) leaves the three fields absent.
	Tools *ToolIntegrity
	// Body produces the costly members on demand; nil leaves them absent.
	Body Body
}

// ToolIntegrity is the tool-integrity guard's verdict on one definition, as rules read it.
type ToolIntegrity struct {
	// Findings is the hidden content found in the definition's strings, sorted: "control",
	// "ansi", "zero_width", "bidi", "tag", "pattern:<name>" (empty: none, or not checked).
	Findings []string
	Pinned   bool // a pin exists for this server and name
	Changed  bool // the definition differs from its pin
}

// RPCError is mcp.error.
type RPCError struct {
	Code    int64
	Message string
}

// Body produces the members of a message that cost a decode. Each is asked at most once per
// evaluation, and only when a rule reads it; nil means absent.
type Body interface {
	Arguments() map[string]any  // mcp.arguments: params.arguments of a request
	Result() any                // mcp.result: the result of a response
	ClientInfo() map[string]any // mcp.client_info: the client's implementation info
}

// lazy holds what an evaluation asked of the HeaderSource and the Body, so that two rules
// reading mcp.arguments decode the arguments once, and the CEL values of the scalar fields read
// so far, so that mcp.method read by every rule is boxed once. The scalar cache is direct-mapped
// by field slot: a collision only boxes again.
type lazy struct {
	done             uint8 // lazyArgs | lazyResult | lazyClientInfo | lazyHeaders
	args, clientInfo map[string]any
	result           any
	headers          map[string]string
	tags             [scalarWays]uint8 // slot+1 of the field cached in vals; 0: none
	vals             [scalarWays]any   // nil: absent
	// unknownTested is the unknown field a presence test (has) read during the current rule.
	unknownTested string
}

const scalarWays = 8

const (
	lazyArgs uint8 = 1 << iota
	lazyResult
	lazyClientInfo
	lazyHeaders
)

func (in *Input) arguments() map[string]any {
	if in.lazy.done&lazyArgs == 0 {
		in.lazy.done |= lazyArgs
		if m := in.Vars.MCP; m != nil && m.Body != nil {
			in.lazy.args = m.Body.Arguments()
		}
	}
	return in.lazy.args
}

func (in *Input) result() any {
	if in.lazy.done&lazyResult == 0 {
		in.lazy.done |= lazyResult
		if m := in.Vars.MCP; m != nil && m.Body != nil {
			in.lazy.result = m.Body.Result()
		}
	}
	return in.lazy.result
}

func (in *Input) clientInfo() map[string]any {
	if in.lazy.done&lazyClientInfo == 0 {
		in.lazy.done |= lazyClientInfo
		if m := in.Vars.MCP; m != nil && m.Body != nil {
			in.lazy.clientInfo = m.Body.ClientInfo()
		}
	}
	return in.lazy.clientInfo
}

func (in *Input) headers() map[string]string {
	if in.lazy.done&lazyHeaders == 0 {
		in.lazy.done |= lazyHeaders
		if r := in.Vars.HTTP; r != nil && r.Headers != nil {
			in.lazy.headers = r.Headers.HeaderMap()
		}
	}
	return in.lazy.headers
}
