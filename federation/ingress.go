package federation

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"

	"mcpintercept/auth"
	"mcpintercept/auth/tokenstage"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// Path is the endpoint's path.
const Path = "/mcp"

// serverName is how the federation names itself to its clients.
const serverName = "mcpintercept-federation"

// MetaServerInfo is where a 2026-07-28 result names the server.
const MetaServerInfo = "io.modelcontextprotocol/serverInfo"

// ingressVersions are the versions the ingress speaks: 2026-07-28 (Conduit's) and the 2025 ones
// the deployed SDKs speak (initialize answered here; no session is created).
var ingressVersions = []string{string(mcp.V20260728), string(mcp.V20251125), string(mcp.V20250618), string(mcp.V20250326)}

// JSON-RPC codes of the ingress's own protocol errors.
const (
	codeParse          = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
)

func (s *Service) ingress() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(Path, s.serveMCP)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeRPC(w, http.StatusNotFound, mcp.EncodeError(nil, codeInvalidRequest, "not found: the MCP endpoint is "+Path, nil))
	})
	return mux
}

// writeRPC writes a JSON-RPC body.
func writeRPC(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Service) serveMCP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodGet, http.MethodDelete:
		// No server→client stream and no session: the federation answers every request in its
		// own response, and issues no Mcp-Session-Id to delete.
		w.Header().Set("Allow", "POST")
		writeRPC(w, http.StatusMethodNotAllowed, mcp.EncodeError(nil, codeInvalidRequest, "method not allowed: the federation keeps no stream or session; POST requests", nil))
		return
	default:
		w.Header().Set("Allow", "POST")
		writeRPC(w, http.StatusMethodNotAllowed, mcp.EncodeError(nil, codeInvalidRequest, "method not allowed", nil))
		return
	}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		writeRPC(w, http.StatusUnsupportedMediaType, mcp.EncodeError(nil, codeInvalidRequest, "Content-Type must be application/json", nil))
		return
	}
	if len(r.Header.Values("Mcp-Session-Id")) > 1 || len(r.Header.Values("MCP-Protocol-Version")) > 1 ||
		len(r.Header.Values("Mcp-Method")) > 1 || len(r.Header.Values("Mcp-Name")) > 1 {
		writeRPC(w, http.StatusBadRequest, mcp.EncodeError(nil, codeInvalidRequest, "a repeated MCP header", nil))
		return
	}
	who, ok := s.checkToken(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.o.RequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeRPC(w, http.StatusRequestEntityTooLarge, mcp.DenialBody(nil, mcp.CodeTooLarge, "request too large", "", "the request body is over federation.limits.request_bytes ("+strconv.FormatInt(s.o.RequestBytes, 10)+")", 0))
			return
		}
		return // the client went away
	}
	m, err := mcp.DecodeMessage(body, mcp.DecodeOptions{MaxSize: int(s.o.RequestBytes)})
	if err != nil {
		code := codeInvalidRequest
		var je *mcp.JSONError
		if errors.As(err, &je) {
			code = codeParse
		}
		writeRPC(w, http.StatusBadRequest, mcp.EncodeError(nil, code, "unreadable request: "+err.Error(), nil))
		return
	}
	switch m.Kind {
	case mcp.KindNotification:
		w.WriteHeader(http.StatusAccepted)
		return
	case mcp.KindResponse, mcp.KindError:
		// The federation sends its clients no requests, so there is nothing to answer.
		writeRPC(w, http.StatusBadRequest, mcp.EncodeError(nil, codeInvalidRequest, "unexpected response: the federation sent no request", nil))
		return
	}
	version := r.Header.Get("MCP-Protocol-Version")
	if v := m.ProtocolVersion(); v != "" && m.Method != mcp.MethodInitialize {
		if version != "" && version != v {
			writeRPC(w, http.StatusBadRequest, mcp.EncodeError(m.ID, mcp.CodeHeaderMismatch, "MCP-Protocol-Version disagrees with _meta protocolVersion", nil))
			return
		}
		version = v
	}
	if version == string(mcp.V20260728) {
		if h := r.Header.Get("Mcp-Method"); h != m.Method {
			writeRPC(w, http.StatusBadRequest, mcp.EncodeError(m.ID, mcp.CodeHeaderMismatch, "Mcp-Method header disagrees with the body's method", nil))
			return
		}
		if sub := mcp.SubjectOf(m.Method); sub != "" {
			h, herr := mcp.DecodeHeaderValue(r.Header.Get("Mcp-Name"))
			if herr != nil || h != m.Name() {
				writeRPC(w, http.StatusBadRequest, mcp.EncodeError(m.ID, mcp.CodeHeaderMismatch, "Mcp-Name header disagrees with the body's "+sub, nil))
				return
			}
		}
	}
	if version != "" && m.Method != mcp.MethodInitialize && !slices.Contains(ingressVersions, version) {
		writeRPC(w, http.StatusBadRequest, mcp.EncodeError(m.ID, codeInvalidRequest, "unsupported protocol version "+strconv.Quote(version), map[string]any{"supported": ingressVersions}))
		return
	}
	writeRPC(w, http.StatusOK, s.answer(r, m, version, who))
}

// caller is what the token check established of the client: its policy variable and the
// identity records carry.
type caller struct {
	auth *policy.Auth
	id   policy.Caller
}

// checkToken judges the request's credentials against the endpoint's canonical URI (the
// authority the client sent the request to, path /mcp): a token for another audience, expired or
// badly signed is refused with 401 before anything else; false when the answer is written.
func (s *Service) checkToken(w http.ResponseWriter, r *http.Request) (caller, bool) {
	if s.o.Tokens == nil {
		return caller{}, true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host, port := r.Host, 0
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		host = h
		port, _ = strconv.Atoi(p)
	}
	if port == 0 {
		if ap, err := netip.ParseAddrPort(s.ln.Addr().String()); err == nil {
			port = int(ap.Port())
		}
	}
	res, err := s.o.Tokens.Check.CheckRequest(r.Context(), auth.Credentials{Authorization: r.Header.Values("Authorization"),
		Target: r.RequestURI, Cookies: r.Header.Values("Cookie")}, auth.CanonicalURI(scheme, host, port, Path))
	if err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, auth.ErrRefused) {
			status = http.StatusUnauthorized
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		}
		s.log.Info("federation: token refused", "client", r.RemoteAddr, "kind", res.Kind, "reason", res.Reason)
		writeRPC(w, status, mcp.DenialBody(nil, mcp.CodeTokenRefused, "token refused", "", res.Reason, 0))
		return caller{}, false
	}
	if !res.Present {
		return caller{auth: &policy.Auth{}}, true
	}
	return caller{auth: tokenstage.AuthVars(res), id: tokenstage.CallerOf(res.Claims, s.o.Tokens.Identity)}, true
}

// answer is the JSON-RPC answer to request m.
func (s *Service) answer(r *http.Request, m *mcp.Message, version string, who caller) []byte {
	switch m.Method {
	case mcp.MethodInitialize:
		v, _ := mcp.StringMember(m.Params, "protocolVersion")
		if !slices.Contains(ingressVersions[1:], v) {
			v = string(mcp.V20251125)
		}
		return result(m.ID, map[string]any{
			"protocolVersion": v,
			"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo":      map[string]any{"name": serverName, "version": Version},
		})
	case mcp.MethodServerDiscover:
		return result(m.ID, map[string]any{
			"resultType":        "complete",
			"supportedVersions": ingressVersions,
			"capabilities":      map[string]any{"tools": map[string]any{"listChanged": false}},
			"_meta":             map[string]any{MetaServerInfo: map[string]any{"name": serverName, "version": Version}},
		})
	case mcp.MethodPing:
		return result(m.ID, map[string]any{})
	case mcp.MethodToolsList:
		if c, ok := mcp.Member(m.Params, "cursor"); ok && string(c) != "null" {
			return mcp.EncodeError(m.ID, mcp.CodeInvalidParams, "invalid cursor: the aggregate is listed in one page", nil)
		}
		return s.list(r, m, version, who)
	case mcp.MethodToolsCall:
		name, ok := mcp.StringMember(m.Params, "name")
		if !ok || name == "" {
			return mcp.EncodeError(m.ID, mcp.CodeInvalidParams, "tools/call needs params.name", nil)
		}
		c := &Call{ID: m.ID, Name: name, Client: r.RemoteAddr, Vars: s.clientVars(r, m, version, who), Caller: who.id}
		if a, ok := m.Param("arguments"); ok && string(a) != "null" {
			if a[0] != '{' {
				return mcp.EncodeError(m.ID, mcp.CodeInvalidParams, "params.arguments must be an object", nil)
			}
			c.Arguments = a
		}
		if meta, ok := m.Param("_meta"); ok && len(meta) > 0 && meta[0] == '{' {
			c.Meta = meta
		}
		return s.disp.Call(r.Context(), c)
	}
	return mcp.EncodeError(m.ID, codeMethodNotFound, "Method not found: the federation serves tools only (prompts and resources of its downstreams are not aggregated)", map[string]any{"method": m.Method})
}

// list is the aggregate as this client may see it: every published tool a call to which the
// rules would not deny this client.
func (s *Service) list(r *http.Request, m *mcp.Message, version string, who caller) []byte {
	p := s.reg.Prepare("")
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.Write(m.ID)
	b.WriteString(`,"result":{"tools":[`)
	vars := s.clientVars(r, m, version, who)
	first := true
	if p.Gen != nil {
		for _, t := range p.Gen.Tools {
			if p.Rules != nil {
				v := vars
				v.MCP = &policy.Message{Version: vars.MCP.Version, Method: mcp.MethodToolsCall, Name: t.Name, Kind: "request", Direction: "client_to_server"}
				v.Downstream = &policy.Downstream{ID: t.Downstream, Tool: t.Original}
				if d := p.Rules.Evaluate(&policy.Input{Probe: true, Vars: v}); d.Action == policy.ActionDeny {
					continue
				}
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			b.Write(t.Def)
		}
	}
	b.WriteString("]")
	if version == string(mcp.V20260728) {
		b.WriteString(`,"resultType":"complete"`)
	}
	b.WriteString("}}")
	return b.Bytes()
}

// clientVars are the client's own facts: its address, its request head, the version and method
// it sent. Nothing a downstream sent is among them.
func (s *Service) clientVars(r *http.Request, m *mcp.Message, version string, who caller) policy.Vars {
	v := policy.Vars{
		Auth: who.auth,
		HTTP: &policy.Request{Method: r.Method, Path: r.URL.Path},
		MCP: &policy.Message{Version: version, Method: m.Method, Name: m.Name(), ID: m.IDText(), Kind: "request",
			Direction: "client_to_server", Body: msgBody{m}},
		Conn: &policy.Conn{Mechanism: "federation", TLS: tlsOf(r)},
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		v.Client = &policy.Client{Address: ap.Addr().Unmap().String(), Port: ap.Port()}
	} else if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		v.Client = &policy.Client{Address: h}
	}
	if l, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(l.String()); err == nil {
			v.Conn.OrigDst, v.Conn.OrigIP, v.Conn.OrigPort = l.String(), ap.Addr().Unmap().String(), ap.Port()
		}
	}
	return v
}

func tlsOf(r *http.Request) string {
	if r.TLS != nil {
		return "terminate"
	}
	return "plaintext"
}

// msgBody gives the rules the request's arguments and client info.
type msgBody struct{ m *mcp.Message }

func (b msgBody) Arguments() map[string]any  { return b.m.Arguments() }
func (b msgBody) Result() any                { return nil }
func (b msgBody) ClientInfo() map[string]any { return b.m.ClientInfo() }

// result is a JSON-RPC result for id.
func result(id json.RawMessage, v any) []byte {
	out, _ := json.Marshal(v)
	return relay(id, "result", out)
}
