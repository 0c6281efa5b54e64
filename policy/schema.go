package policy

import (
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// The variables a rule can read. Each is a CEL object type whose fields are declared once, in
// schema below, with their CEL type and the lowest awareness level that can see them: the
// checker rejects a field that does not exist (mcp.tool_name), and Set.CheckLevel one the
// route's level cannot see.
const (
	varClient = "client"
	varConn   = "conn"
	varHTTP   = "http"
	varMCP    = "mcp"
	varAuth   = "auth"
	// varDownstream is the federation route of a call or list entry (Vars.Downstream).
	varDownstream = "downstream"
)

// field is one declared field of a variable (or of an object inside one, such as mcp.error).
type field struct {
	name  string
	typ   *types.Type
	level Level
	doc   string
	// prov is who may set the field's value (see Provenance); every field of a variable has one,
	// and a test holds each ProvClient field against a server that writes it into its own message.
	prov Provenance
	// path is "var.name" for a field of a variable ("" for a nested object's field); Vars.Unknown
	// names fields by it.
	path string
	// get reads the field from the typed facts; ok false means absent. It returns ref.Val for
	// scalars, so the interpreter boxes a value once rather than twice.
	get func(obj any) (any, bool)
	// str, for string fields, reads without boxing: the rate limit key fast path uses it.
	str func(obj any) (string, bool)
	ft  *types.FieldType
	// slot numbers the scalar fields of the variables, for the cache of boxed values in Input.
	slot uint8
}

// object is a declared CEL object type.
type object struct {
	varName string // the variable it is bound to; "" for a nested object (mcp.error)
	typ     *types.Type
	fields  []*field
	byName  map[string]*field
}

func (o *object) lookup(obj any, key string) (any, bool) {
	f, ok := o.byName[key]
	if !ok {
		return nil, false
	}
	return f.lookup(obj)
}

// maxLevel is the level at which every field of o can be present.
func (o *object) maxLevel() Level {
	l := LevelConn
	for _, f := range o.fields {
		l = max(l, f.level)
	}
	return l
}

// lookup reads the field from obj: the typed facts, or the map of an Input built the old way.
func (f *field) lookup(obj any) (any, bool) {
	if m, ok := obj.(map[string]any); ok {
		v, ok := m[f.name]
		return v, ok
	}
	return f.get(obj)
}

// missingField is the error of an absent field. Its text is CEL's own for a missing map key, the
// form Evaluate turns into Decision.Absent.
type missingField string

func (e missingField) Error() string { return noSuchKey + string(e) }

func (f *field) getFrom(obj any) (any, error) {
	if v, ok := f.lookup(obj); ok {
		if u, isUnknown := v.(unknownField); isUnknown {
			return nil, u
		}
		return v, nil
	}
	return nil, missingField(f.name)
}

// isSet is has(). An unknown field is set (the fact exists, its value cannot be established),
// and testing it marks the evaluation: the rule then fails to evaluate whatever it returned, so
// that neither has() nor !has() can make an unknown client look like one that sent nothing.
func (f *field) isSet(obj any) bool {
	v, ok := f.lookup(obj)
	if u, isUnknown := v.(unknownField); ok && isUnknown {
		if in := inputOf(obj); in != nil {
			in.lazy.unknownTested = string(u)
		}
	}
	return ok
}

// unknownField is the value of a field named in Vars.Unknown: a fact the caller cannot establish
// for this message (Level 2 cannot tell which client a server→client request goes to). Unlike an
// absent field, which makes a rule not match, reading it is an evaluation error: the rule fails
// (on_rule_error), never silently skipped.
type unknownField string

func (e unknownField) Error() string {
	return string(e) + " cannot be established for this message (unknown, not absent)"
}

// withUnknown wraps the getter of a variable's field f: a field the Input names in Vars.Unknown
// reads as unknownField.
func withUnknown(f *field, get func(any) (any, bool)) func(any) (any, bool) {
	return func(o any) (any, bool) {
		if in := inputOf(o); in != nil && len(in.Vars.Unknown) > 0 && in.isUnknown(f.path) {
			return unknownField(f.path), true
		}
		return get(o)
	}
}

// isUnknown reports whether path is one of Vars.Unknown.
func (in *Input) isUnknown(path string) bool {
	for _, u := range in.Vars.Unknown {
		if u == path {
			return true
		}
	}
	return false
}

// Views of an Input, one per variable: what the activation hands the interpreter. Being the
// Input's own pointer converted, they cost no allocation.
type (
	clientView     Input
	connView       Input
	httpView       Input
	mcpView        Input
	authView       Input
	downstreamView Input
)

// FindStringKey serves mcp[k] and the like (the interpreter's hook for map-like values).
func (v *clientView) FindStringKey(k string) (any, bool) { return clientObj.lookup(v, k) }
func (v *connView) FindStringKey(k string) (any, bool)   { return connObj.lookup(v, k) }
func (v *httpView) FindStringKey(k string) (any, bool)   { return httpObj.lookup(v, k) }
func (v *mcpView) FindStringKey(k string) (any, bool)    { return mcpObj.lookup(v, k) }
func (v *authView) FindStringKey(k string) (any, bool)   { return authObj.lookup(v, k) }
func (v *downstreamView) FindStringKey(k string) (any, bool) {
	return downstreamObj.lookup(v, k)
}

// FindStringKey serves auth.claims["sub"].
func (c *Claims) FindStringKey(k string) (any, bool) { return claimsObj.lookup(c, k) }

// FindStringKey serves client.pod["name"].
func (p *Pod) FindStringKey(k string) (any, bool) { return podObj.lookup(p, k) }

// FindStringKey serves mcp.error["code"].
func (e *RPCError) FindStringKey(k string) (any, bool) { return rpcErrorObj.lookup(e, k) }

func clientOf(o any) *Client {
	if v, ok := o.(*clientView); ok {
		return v.Vars.Client
	}
	return nil
}

func processOf(o any) *Process {
	if c := clientOf(o); c != nil {
		return c.Process
	}
	return nil
}

func connOf(o any) *Conn {
	if v, ok := o.(*connView); ok {
		return v.Vars.Conn
	}
	return nil
}

func requestOf(o any) *Request {
	if v, ok := o.(*httpView); ok {
		return v.Vars.HTTP
	}
	return nil
}

func messageOf(o any) *Message {
	if v, ok := o.(*mcpView); ok {
		return v.Vars.MCP
	}
	return nil
}

// toolsOf is mcp's tool-integrity verdict; nil when absent.
func toolsOf(o any) *ToolIntegrity {
	if m := messageOf(o); m != nil {
		return m.Tools
	}
	return nil
}

// noFindings is tool_findings of a definition without any: present, empty.
var noFindings = types.NewStringList(types.DefaultTypeAdapter, []string{})

func authOf(o any) *Auth {
	if v, ok := o.(*authView); ok {
		return v.Vars.Auth
	}
	return nil
}

func downstreamOf(o any) *Downstream {
	if v, ok := o.(*downstreamView); ok {
		return v.Vars.Downstream
	}
	return nil
}

func claimsOf(o any) *Claims {
	c, _ := o.(*Claims)
	return c
}

func boolField[T any](name string, level Level, doc string, of func(any) *T, get func(*T) bool) *field {
	return &field{name: name, typ: types.BoolType, level: level, doc: doc,
		get: func(o any) (any, bool) {
			t := of(o)
			if t == nil {
				return nil, false
			}
			return types.Bool(get(t)), true
		}}
}

// strField declares a string field read by get; present reports presence when the string may
// legitimately be empty (nil: present when non-empty).
func strField[T any](name string, level Level, doc string, of func(any) *T, get func(*T) string, present func(*T) bool) *field {
	str := func(o any) (string, bool) {
		t := of(o)
		if t == nil {
			return "", false
		}
		s := get(t)
		if present != nil {
			return s, present(t)
		}
		return s, s != ""
	}
	return &field{name: name, typ: types.StringType, level: level, doc: doc, str: str,
		get: func(o any) (any, bool) {
			s, ok := str(o)
			if !ok {
				return nil, false
			}
			return types.String(s), true
		}}
}

func intField[T any](name string, level Level, doc string, of func(any) *T, get func(*T) int64) *field {
	return &field{name: name, typ: types.IntType, level: level, doc: doc,
		get: func(o any) (any, bool) {
			t := of(o)
			if t == nil {
				return nil, false
			}
			return types.Int(get(t)), true
		}}
}

func always[T any](*T) bool { return true }

var (
	clientObj = newObject(varClient, "policy.Client",
		strField("address", LevelConn, "client IP address", clientOf, func(c *Client) string { return c.Address }, always),
		intField("port", LevelConn, "client port", clientOf, func(c *Client) int64 { return int64(c.Port) }),
		intField("pid", LevelConn, "process id (eBPF only)", processOf, func(p *Process) int64 { return int64(p.PID) }),
		intField("uid", LevelConn, "process user id (eBPF only)", processOf, func(p *Process) int64 { return int64(p.UID) }),
		intField("gid", LevelConn, "process group id (eBPF only)", processOf, func(p *Process) int64 { return int64(p.GID) }),
		strField("comm", LevelConn, "process name (eBPF only)", processOf, func(p *Process) string { return p.Comm }, always),
		strField("exe", LevelConn, "process executable path (eBPF only)", processOf, func(p *Process) string { return p.Exe }, always),
		intField("cgroup", LevelConn, "process cgroup id (eBPF only)", processOf, func(p *Process) int64 { return int64(p.Cgroup) }),
		&field{name: "pod", typ: podObj.typ, level: LevelConn, doc: "the Kubernetes pod: namespace, name, uid, service_account, labels (node agent only)",
			get: func(o any) (any, bool) {
				c := clientOf(o)
				if c == nil || c.Pod == nil {
					return nil, false
				}
				return c.Pod, true
			}},
	)
	podObj = newObject("", "policy.Pod",
		strField("namespace", LevelConn, "the pod's namespace", podOf, func(p *Pod) string { return p.Namespace }, always),
		strField("name", LevelConn, "the pod's name", podOf, func(p *Pod) string { return p.Name }, always),
		strField("uid", LevelConn, "the pod's uid", podOf, func(p *Pod) string { return p.UID }, nil),
		strField("service_account", LevelConn, "the pod's service account", podOf, func(p *Pod) string { return p.ServiceAccount }, nil),
		&field{name: "labels", typ: types.NewMapType(types.StringType, types.StringType), level: LevelConn, doc: "the pod's labels",
			get: func(o any) (any, bool) {
				p := podOf(o)
				if p == nil {
					return nil, false
				}
				return p.labels(), true
			}},
	)
	connObj = newObject(varConn, "policy.Conn",
		strField("orig_dst", LevelConn, "original destination, IP:port", connOf, func(c *Conn) string { return c.OrigDst }, always),
		strField("orig_ip", LevelConn, "original destination IP", connOf, func(c *Conn) string { return c.OrigIP }, always),
		intField("orig_port", LevelConn, "original destination port", connOf, func(c *Conn) int64 { return int64(c.OrigPort) }),
		strField("sni", LevelConn, "TLS server name; absent without a ClientHello", connOf, func(c *Conn) string { return c.SNI }, func(c *Conn) bool { return c.Hello }),
		strField("mechanism", LevelConn, "steering mechanism", connOf, func(c *Conn) string { return c.Mechanism }, always),
		strField("tls", LevelConn, "passthrough, terminate or plaintext", connOf, func(c *Conn) string { return c.TLS }, always),
		strField("credential", LevelConn, "the credential the route adds upstream: inject or exchange; absent when none (the client's own passes)", connOf, func(c *Conn) string { return c.Credential }, func(c *Conn) bool { return c.Credential != "" }),
	)
	httpObj = newObject(varHTTP, "policy.HTTP",
		strField("method", LevelHeaders, "HTTP method", requestOf, func(r *Request) string { return r.Method }, always),
		strField("path", LevelHeaders, "path without query", requestOf, func(r *Request) string { return r.Path }, always),
		&field{name: "headers", typ: types.NewMapType(types.StringType, types.StringType), level: LevelHeaders,
			doc: "lower-case name to first value; credentials left out",
			get: func(o any) (any, bool) {
				v, ok := o.(*httpView)
				if !ok {
					return nil, false
				}
				h := (*Input)(v).headers()
				return h, h != nil
			}},
	)
	rpcErrorObj = newObject("", "policy.RPCError",
		intField("code", LevelBody, "JSON-RPC error code", rpcErrorOf, func(e *RPCError) int64 { return e.Code }),
		strField("message", LevelBody, "JSON-RPC error message", rpcErrorOf, func(e *RPCError) string { return e.Message }, always),
	)
	mcpObj = newObject(varMCP, "policy.MCP",
		strField("version", LevelHeaders, "protocol version (MCP-Protocol-Version at Level 1)", messageOf, func(m *Message) string { return m.Version }, nil),
		strField("method", LevelHeaders, "JSON-RPC method (Mcp-Method at Level 1)", messageOf, func(m *Message) string { return m.Method }, nil),
		strField("name", LevelHeaders, "tool, prompt or resource (Mcp-Name at Level 1)", messageOf, func(m *Message) string { return m.Name }, nil),
		strField("session", LevelHeaders, "hash of Mcp-Session-Id", messageOf, func(m *Message) string { return m.Session }, nil),
		strField("id", LevelBody, "JSON-RPC id as text", messageOf, func(m *Message) string { return m.ID }, nil),
		strField("direction", LevelBody, "client_to_server or server_to_client", messageOf, func(m *Message) string { return m.Direction }, nil),
		strField("kind", LevelBody, "request, notification, response or error", messageOf, func(m *Message) string { return m.Kind }, nil),
		strField("tool", LevelBody, "the tool a server→client request belongs to", messageOf, func(m *Message) string { return m.Tool }, nil),
		strField("mode", LevelBody, "an elicitation's mode (form, url)", messageOf, func(m *Message) string { return m.Mode }, nil),
		&field{name: "retry", typ: types.BoolType, level: LevelBody, doc: "a request repeated with its input responses",
			get: func(o any) (any, bool) {
				m := messageOf(o)
				if m == nil || !m.Retry {
					return nil, false
				}
				return types.True, true
			}},
		&field{name: "error", typ: rpcErrorObj.typ, level: LevelBody, doc: "a JSON-RPC error: code, message",
			get: func(o any) (any, bool) {
				m := messageOf(o)
				if m == nil || m.Error == nil {
					return nil, false
				}
				return m.Error, true
			}},
		&field{name: "tool_findings", typ: types.NewListType(types.StringType), level: LevelBody,
			doc: "hidden content in the definition of the tool, prompt or template a tools/call, prompts/get or list entry names: control, ansi, zero_width (every other Unicode Default_Ignorable_Code_Point and U+FFF9–FFFB), bidi (Bidi_Control), tag (U+E0000–E007F), invalid_utf8, pattern:<name> (sorted; empty when none or the route has no tool_pins)",
			get: func(o any) (any, bool) {
				t := toolsOf(o)
				if t == nil {
					return nil, false
				}
				if len(t.Findings) == 0 {
					return noFindings, true
				}
				return types.NewStringList(types.DefaultTypeAdapter, t.Findings), true
			}},
		boolField("tool_pinned", LevelBody, "that definition has a pin (tool_pins learn or enforce; false without tool_pins)", toolsOf, func(t *ToolIntegrity) bool { return t.Pinned }),
		boolField("tool_changed", LevelBody, "that definition differs from its pin (a changed definition is quarantined)", toolsOf, func(t *ToolIntegrity) bool { return t.Changed }),
		lazyField("arguments", types.NewMapType(types.StringType, types.DynType), "params.arguments of a request",
			func(in *Input) (any, bool) { a := in.arguments(); return a, a != nil }),
		lazyField("result", types.DynType, "the result of a response",
			func(in *Input) (any, bool) { r := in.result(); return r, r != nil }),
		lazyField("client_info", types.NewMapType(types.StringType, types.DynType), "the client's implementation info",
			func(in *Input) (any, bool) { c := in.clientInfo(); return c, c != nil }),
	)
	claimsObj = newObject("", "policy.Claims",
		strField("iss", LevelHeaders, "the token's issuer", claimsOf, func(c *Claims) string { return c.Iss }, nil),
		strField("sub", LevelHeaders, "the token's subject: the caller", claimsOf, func(c *Claims) string { return c.Sub }, nil),
		strField("azp", LevelHeaders, "the party the token was issued to", claimsOf, func(c *Claims) string { return c.Azp }, nil),
		strField("client_id", LevelHeaders, "the OAuth client the token was issued to", claimsOf, func(c *Claims) string { return c.ClientID }, nil),
		strField("scope", LevelHeaders, "the token's scopes, space-separated", claimsOf, func(c *Claims) string { return c.Scope }, nil),
		&field{name: "aud", typ: types.NewListType(types.StringType), level: LevelHeaders, doc: "the token's audiences",
			get: func(o any) (any, bool) {
				c := claimsOf(o)
				if c == nil || len(c.Aud) == 0 {
					return nil, false
				}
				return types.NewStringList(types.DefaultTypeAdapter, c.Aud), true
			}},
	)
	// authObj is what the token check read of the request's credentials; never the token.
	authObj = newObject(varAuth, "policy.Auth",
		boolField("present", LevelHeaders, "the request carried an Authorization header", authOf, func(a *Auth) bool { return a.Present }),
		strField("scheme", LevelHeaders, "its scheme, lower-cased (bearer, basic)", authOf, func(a *Auth) string { return a.Scheme }, nil),
		boolField("verified", LevelHeaders, "the token's signature was checked against a configured issuer", authOf, func(a *Auth) bool { return a.Verified }),
		&field{name: "claims", typ: claimsObj.typ, level: LevelHeaders, doc: "the token's claims: iss, sub, aud, azp, client_id, scope",
			get: func(o any) (any, bool) {
				a := authOf(o)
				if a == nil {
					return nil, false
				}
				return &a.Claims, true
			}},
	)
	// downstreamObj is the federation route of a call or list entry: present only when the
	// aggregate endpoint of a federation judges it (Vars.Downstream), so Level 2, where the
	// JSON-RPC body names the tool.
	downstreamObj = newObject(varDownstream, "policy.Downstream",
		strField("id", LevelBody, "the configured id of the downstream the aggregate name routes to (federation only)", downstreamOf, func(d *Downstream) string { return d.ID }, nil),
		strField("tool", LevelBody, "the tool's name as that downstream lists it (federation only)", downstreamOf, func(d *Downstream) string { return d.Tool }, nil),
	)
	// objects are the declared types by CEL type name.
	objects = map[string]*object{}
	// roots are the objects bound to variables, in declaration order.
	roots = []*object{clientObj, connObj, httpObj, mcpObj, authObj, downstreamObj}
)

func init() {
	for _, o := range []*object{clientObj, podObj, connObj, httpObj, mcpObj, rpcErrorObj, authObj, claimsObj, downstreamObj} {
		objects[o.typ.TypeName()] = o
	}
}

func podOf(o any) *Pod {
	p, _ := o.(*Pod)
	return p
}

func rpcErrorOf(o any) *RPCError {
	e, _ := o.(*RPCError)
	return e
}

func lazyField(name string, typ *types.Type, doc string, get func(*Input) (any, bool)) *field {
	return &field{name: name, typ: typ, level: LevelBody, doc: doc,
		get: func(o any) (any, bool) {
			v, ok := o.(*mcpView)
			if !ok {
				return nil, false
			}
			return get((*Input)(v))
		}}
}

// scalarSlots counts the cached fields (see lazy).
var scalarSlots uint8

func newObject(varName, typeName string, fields ...*field) *object {
	o := &object{varName: varName, typ: types.NewObjectType(typeName), fields: fields, byName: map[string]*field{}}
	for _, f := range fields {
		if varName != "" {
			f.path = varName + "." + f.name
			f.get = withUnknown(f, f.get)
			if f.str != nil {
				str, path := f.str, f.path
				f.str = func(o any) (string, bool) {
					if in := inputOf(o); in != nil && len(in.Vars.Unknown) > 0 && in.isUnknown(path) {
						return "", false // resolveString leaves unknowns to CEL, which fails
					}
					return str(o)
				}
			}
		}
		if varName != "" && (f.str != nil || f.typ == types.IntType) {
			scalarSlots++
			f.slot = scalarSlots
			f.get = cached(f.slot, f.get)
		}
		f.ft = &types.FieldType{Type: f.typ, IsSet: f.isSet, GetFrom: f.getFrom}
		o.byName[f.name] = f
	}
	return o
}

// cached keeps the boxed value of a scalar field for the rest of the evaluation.
func cached(slot uint8, get func(any) (any, bool)) func(any) (any, bool) {
	way := slot % scalarWays
	return func(o any) (any, bool) {
		in := inputOf(o)
		if in == nil {
			return get(o)
		}
		if in.lazy.tags[way] == slot {
			v := in.lazy.vals[way]
			return v, v != nil
		}
		v, ok := get(o)
		if !ok {
			v = nil
		}
		in.lazy.tags[way], in.lazy.vals[way] = slot, v
		return v, ok
	}
}

func inputOf(o any) *Input {
	switch v := o.(type) {
	case *clientView:
		return (*Input)(v)
	case *connView:
		return (*Input)(v)
	case *httpView:
		return (*Input)(v)
	case *mcpView:
		return (*Input)(v)
	case *authView:
		return (*Input)(v)
	case *downstreamView:
		return (*Input)(v)
	}
	return nil
}

func rootObject(name string) *object {
	for _, o := range roots {
		if o.varName == name {
			return o
		}
	}
	return nil
}

// materialize builds the map form of a typed value, for the rare rule that uses a variable as a
// whole (size(mcp), "x" in mcp): that reads every field anyway.
func materialize(o *object, obj any) map[string]any {
	out := map[string]any{}
	for _, f := range o.fields {
		if v, ok := f.lookup(obj); ok {
			switch nested := v.(type) {
			case *RPCError:
				v = materialize(rpcErrorObj, nested)
			case *Claims:
				v = materialize(claimsObj, nested)
			}
			out[f.name] = v
		}
	}
	return out
}

// provider declares the object types to the checker and the planner, and converts the typed
// facts to CEL values where a rule uses one as a whole.
type provider struct {
	*types.Registry
}

func newProvider() (*provider, error) {
	reg, err := types.NewRegistry()
	if err != nil {
		return nil, err
	}
	return &provider{Registry: reg}, nil
}

func (p *provider) FindStructType(name string) (*types.Type, bool) {
	if o, ok := objects[name]; ok {
		return types.NewTypeTypeWithParam(o.typ), true
	}
	return p.Registry.FindStructType(name)
}

func (p *provider) FindStructFieldNames(name string) ([]string, bool) {
	if o, ok := objects[name]; ok {
		names := make([]string, len(o.fields))
		for i, f := range o.fields {
			names[i] = f.name
		}
		return names, true
	}
	return p.Registry.FindStructFieldNames(name)
}

func (p *provider) FindStructFieldType(name, fieldName string) (*types.FieldType, bool) {
	if o, ok := objects[name]; ok {
		f, ok := o.byName[fieldName]
		if !ok {
			return nil, false
		}
		return f.ft, true
	}
	return p.Registry.FindStructFieldType(name, fieldName)
}

func (p *provider) NewValue(name string, fields map[string]ref.Val) ref.Val {
	if _, ok := objects[name]; ok {
		return types.NewErr("%s values cannot be constructed", name)
	}
	return p.Registry.NewValue(name, fields)
}

func (p *provider) NativeToValue(v any) ref.Val {
	switch v := v.(type) {
	case *clientView:
		return types.NewStringInterfaceMap(p, materialize(clientObj, v))
	case *connView:
		return types.NewStringInterfaceMap(p, materialize(connObj, v))
	case *httpView:
		return types.NewStringInterfaceMap(p, materialize(httpObj, v))
	case *mcpView:
		return types.NewStringInterfaceMap(p, materialize(mcpObj, v))
	case *authView:
		return types.NewStringInterfaceMap(p, materialize(authObj, v))
	case *downstreamView:
		return types.NewStringInterfaceMap(p, materialize(downstreamObj, v))
	case *RPCError:
		return types.NewStringInterfaceMap(p, materialize(rpcErrorObj, v))
	case *Claims:
		return types.NewStringInterfaceMap(p, materialize(claimsObj, v))
	case unknownField:
		// Read through mcp["client_info"] or a materialized variable: still an error.
		return types.NewErr("%s", v.Error())
	}
	return p.Registry.NativeToValue(v)
}
