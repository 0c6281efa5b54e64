// Package credentials keeps credentials out of the sandbox: on a route with `credentials:`, the
// workload holds no real credential (or a worthless placeholder) and the appliance, which
// terminated the client's TLS and verifies the server it forwards to, adds the real one on the
// way out — read from a file (inject), or obtained by OAuth 2.0 Token Exchange (RFC 8693) for the
// client's own token (exchange). Only to the destination the route names, only on terminate and
// plaintext routes (config refuses the others), never a DPoP-bound token.
//
// Two stages: Factory runs first among the stages that read the request (before the token
// check), removes the placeholder and judges what else the client sent; OutFactory runs last and
// adds the credential, after every stage judged the request, so that nothing is exchanged for a
// request that is refused and no stage or record ever sees the value.
package credentials

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/auth"
	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
)

// Name is the stage's name in the chain and the key of its options; OutName the adding stage's.
const (
	Name    = "credentials"
	OutName = "credentials-out"
)

// The actions, as config spells them and records say them.
const (
	ActionInject   = "inject"
	ActionExchange = "exchange"
	// Records say what was done.
	Injected  = "injected"
	Exchanged = "exchanged"
)

// Options are a route's credentials (stage.Get(route options, Name)).
type Options struct {
	// Action is ActionInject or ActionExchange.
	Action string
	// Header is the field the credential goes in; Scheme precedes the value ("" none).
	Header, Scheme string
	// Source names where the credential comes from (records, logs): "file:<path>" or the token
	// endpoint. Never the value.
	Source string
	// Placeholder is what the workload sends instead (after the scheme in Authorization).
	Placeholder string
	// Strip removes any other credential the client sent; false refuses the request (401).
	Strip bool
	// Secret is the injected credential (inject), nil for exchange.
	Secret *Secret
	// Exchanger trades the client's token (exchange), nil for inject.
	Exchanger *Exchanger
}

// rule is the records' rule of a request this stage refused.
const rule = "credentials"

type metrics struct {
	added     *prometheus.CounterVec
	refused   *prometheus.CounterVec
	exchanges *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	scrubbed  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		added: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_credentials_added_total",
			Help: "Requests forwarded with the route's credential, by route and how it was obtained (injected, exchanged)."},
			[]string{"route", "credential"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_credentials_refused_total",
			Help: "Requests of a credentials route refused, by route and reason (other, dpop, query, ambiguous, missing, unavailable)."},
			[]string{"route", "reason"}),
	}
	m.exchanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpintercept_credential_exchanges_total",
		Help: "Token exchanges (RFC 8693) of credentials routes, by route and outcome: ok and error: the token endpoint was asked; cached: a token kept from an earlier exchange (or one a concurrent request was getting) served."},
		[]string{"route", "outcome"})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpintercept_credential_tokens_dropped_total",
		Help: "Exchanged tokens dropped from the cache because the server answered 401 to them, by route (the next request is exchanged afresh)."},
		[]string{"route"})
	m.scrubbed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpintercept_credentials_scrubbed_total",
		Help: "Responses of credentials routes that reflected the added credential (a header, a Level 2 body or event), which was replaced before the client saw it, by route."},
		[]string{"route"})
	m.scrubbed = telemetry.Registered(reg, m.scrubbed)
	m.exchanges = telemetry.Registered(reg, m.exchanges)
	m.dropped = telemetry.Registered(reg, m.dropped)
	m.added = telemetry.Registered(reg, m.added)
	m.refused = telemetry.Registered(reg, m.refused)
	return m
}

// Stages are the two stages of the feature, sharing their metrics.
type Stages struct{ m *metrics }

// New makes the feature's stages, counting on reg (nil: unregistered).
func New(reg prometheus.Registerer) *Stages { return &Stages{m: newMetrics(reg)} }

// inState is what the first stage leaves for the second on one exchange.
type inState struct {
	subject string // the client's bearer token (exchange)
}

type inKey struct{}

// Factory is the first stage: at every level that reads HTTP, after classification and before
// the token check.
func (s *Stages) Factory() stage.Factory {
	return stage.Factory{Name: Name, Levels: stage.FromLevel(1), New: func(c *stage.Conn) exchange.Stage {
		o, _ := stage.Get[*Options](c.Options, Name)
		if o == nil {
			return nil
		}
		if c.ConnVars != nil {
			// conn.credential: the route's setting (provenance appliance).
			c.ConnVars.Credential = o.Action
		}
		return &inStage{o: o, route: c.Route, level: c.Level, m: s.m}
	}}
}

// OutFactory is the second stage: last in the chain, it adds the credential.
func (s *Stages) OutFactory() stage.Factory {
	return stage.Factory{Name: OutName, Levels: stage.FromLevel(1), New: func(c *stage.Conn) exchange.Stage {
		o, _ := stage.Get[*Options](c.Options, Name)
		if o == nil {
			return nil
		}
		return &outStage{o: o, route: c.Route, level: c.Level, m: s.m, canonical: canonicalOf(c)}
	}}
}

type inStage struct {
	exchange.Base
	o     *Options
	route string
	level int
	m     *metrics
}

// sameField reports whether a field name is name, or one a server reads as name: CGI and WSGI
// (Python's servers, PHP) turn '-' and '_' alike into '_' in HTTP_* variables.
func sameField(field, name string) bool {
	if len(field) != len(name) {
		return false
	}
	for i := 0; i < len(field); i++ {
		if fold(field[i]) != fold(name[i]) {
			return false
		}
	}
	return true
}

// fold is a field name's byte as CGI reads it: lower case, '_' for '-'.
func fold(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '-':
		return '_'
	}
	return c
}

// noAuth is auth of a request that carries no credential of the client's own.
var noAuth = &policy.Auth{}

// RequestHead removes the placeholder, refuses what cannot be replaced (DPoP, a token in the
// query) and another credential (or strips it, as the route says), and keeps the client's token
// for the exchange.
func (s *inStage) RequestHead(ctx context.Context, x *exchange.Exchange) exchange.Result {
	req := x.Req
	if _, ok := req.Get("DPoP"); ok {
		return s.refuse(x, http.StatusUnauthorized, "dpop", "a DPoP proof came with the request: DPoP binds each request's method and URL to the client's key, so the appliance cannot replace or add a credential for it (route credentials)")
	}
	if auth.TokenInQuery(req.Target) {
		return s.refuse(x, http.StatusUnauthorized, "query", "an access token in the request's query: the route adds its own credential and one in the query can be neither replaced nor removed")
	}
	header := s.o.Header
	authz := strings.EqualFold(header, "Authorization")
	var keep []exchange.Header
	var subject string
	placeholder, other, subjects := false, false, 0
	var variants []string // the names of fields servers may read as the credential's
	for _, h := range req.Headers {
		isCred := sameField(h.Name, header)
		isAuthz := sameField(h.Name, "Authorization")
		if !isCred && !isAuthz {
			keep = append(keep, h)
			continue
		}
		if !strings.EqualFold(h.Name, header) && !strings.EqualFold(h.Name, "Authorization") {
			// X_Api_Key beside X-Api-Key: a CGI/WSGI server reads both as HTTP_X_API_KEY, so
			// the client's value could be the one it takes. Another credential.
			variants = append(variants, h.Name)
			other = true
			continue
		}
		scheme, cred, err := "", "", error(nil)
		if isAuthz {
			scheme, cred, err = auth.SplitAuthorization(h.Value)
		}
		switch {
		case isAuthz && scheme == "dpop":
			return s.refuse(x, http.StatusUnauthorized, "dpop", "a DPoP-bound token: DPoP binds each request's method and URL to the client's key, so the appliance cannot replace it (route credentials)")
		case s.o.Placeholder != "" && isCred && authz && (err == nil && scheme == "bearer" && strings.EqualFold(s.o.Scheme, "bearer") && cred == s.o.Placeholder ||
			strings.Trim(h.Value, " \t") == s.o.Scheme+" "+s.o.Placeholder):
			placeholder = true
		case s.o.Placeholder != "" && isCred && !authz && strings.Trim(h.Value, " \t") == s.o.Placeholder:
			placeholder = true
		case s.o.Action == ActionExchange && isAuthz && err == nil && scheme == "bearer" && cred != "":
			// The client's own token: the subject of the exchange, judged by the token stage.
			subject, subjects = cred, subjects+1
			keep = append(keep, h)
		default:
			other = true
		}
	}
	switch {
	case subjects > 1:
		return s.refuse(x, http.StatusBadRequest, "ambiguous", "more than one Authorization field: servers would read different tokens")
	case other && !s.o.Strip:
		return s.refuse(x, http.StatusUnauthorized, "other", "the request carries a credential of its own; this route adds the real one and refuses any other (credentials.other: refuse)")
	case s.o.Action == ActionExchange && subject == "":
		return s.refuse(x, http.StatusUnauthorized, "missing", "no bearer token to exchange: the route exchanges the client's own token for the server's (credentials.exchange)")
	}
	if placeholder || other {
		// Every later stage, rule and record reads the request as if the workload had sent
		// neither; the forwarded head loses them too (the credential replaces or they go).
		h := *req
		h.Headers = keep
		x.Req = &h
		x.DelRequestHeader(header)
		if !authz {
			x.DelRequestHeader("Authorization")
		}
		for _, n := range variants {
			x.DelRequestHeader(n)
		}
	}
	// Responses are read to keep a reflected credential from the client: ask for them unencoded.
	x.DelRequestHeader("Accept-Encoding")
	if subject == "" {
		x.Set(policy.AuthKey{}, noAuth)
	} else {
		x.Set(policy.AuthKey{}, &policy.Auth{Present: true, Scheme: "bearer"})
		x.Set(inKey{}, &inState{subject: subject})
	}
	return exchange.Continue
}

func (s *inStage) refuse(x *exchange.Exchange, status int, kind, reason string) exchange.Result {
	s.m.refused.WithLabelValues(s.route, kind).Inc()
	return answer(x, s.level, status, mcp.CodeTokenRefused, "credential refused", reason)
}

// answer refuses before anything is forwarded, as the token stage does: a JSON-RPC error naming
// the appliance at Level 2 (id null: the body was not read), plain at Level 1.
func answer(x *exchange.Exchange, level, status, code int, message, reason string) exchange.Result {
	var headers []exchange.Header
	var body []byte
	if level >= 2 {
		headers = append(headers, exchange.Header{Name: "Content-Type", Value: "application/json"})
		body = mcp.DenialBody(nil, code, message, rule, reason, 0)
	} else {
		headers, body = exchange.PlainTextHeaders, exchange.PlainText(reason)
	}
	x.Answer(status, headers, body, exchange.Verdict{Decision: exchange.Deny, Status: status, Rule: rule, Reason: reason})
	return exchange.Stop
}

type outStage struct {
	exchange.Base
	o         *Options
	route     string
	level     int
	m         *metrics
	canonical func(x *exchange.Exchange) string
}

// exchangedKey keeps the cache entry a forwarded request's token came from (for a 401).
type exchangedKey struct{}

// RequestHead adds the credential now unless a stage wants the body, in which case the body's
// judgement comes first (RequestBody).
func (s *outStage) RequestHead(ctx context.Context, x *exchange.Exchange) exchange.Result {
	if x.WantsRequestBody() {
		return exchange.Continue
	}
	return s.add(ctx, x)
}

// RequestBody adds the credential once every stage judged the body.
func (s *outStage) RequestBody(ctx context.Context, x *exchange.Exchange) exchange.Result {
	return s.add(ctx, x)
}

func (s *outStage) add(ctx context.Context, x *exchange.Exchange) exchange.Result {
	var value string
	switch s.o.Action {
	case ActionInject:
		v, err := s.o.Secret.Value()
		if err != nil {
			s.m.refused.WithLabelValues(s.route, "unavailable").Inc()
			return answer(x, s.level, http.StatusServiceUnavailable, mcp.CodeCredentialUnavailable, "credential unavailable", err.Error())
		}
		value = v
	case ActionExchange:
		st, _ := x.Get(inKey{}).(*inState)
		if s.o.Exchanger == nil {
			s.m.refused.WithLabelValues(s.route, "unavailable").Inc()
			return answer(x, s.level, http.StatusServiceUnavailable, mcp.CodeCredentialUnavailable, "credential unavailable", "the route's token exchange is not set up")
		}
		if st == nil {
			// The first stage always leaves one on an exchange route; without it, no credential.
			s.m.refused.WithLabelValues(s.route, "missing").Inc()
			return answer(x, s.level, http.StatusUnauthorized, mcp.CodeTokenRefused, "credential refused", "no bearer token to exchange")
		}
		tok, fresh, err := s.o.Exchanger.Token(ctx, st.subject, s.canonical(x))
		switch {
		case err != nil:
			s.m.exchanges.WithLabelValues(s.route, "error").Inc()
		case fresh:
			s.m.exchanges.WithLabelValues(s.route, "ok").Inc()
		default:
			s.m.exchanges.WithLabelValues(s.route, "cached").Inc()
		}
		if err != nil {
			s.m.refused.WithLabelValues(s.route, "unavailable").Inc()
			return answer(x, s.level, http.StatusBadGateway, mcp.CodeCredentialUnavailable, "credential unavailable", err.Error())
		}
		x.Set(exchangedKey{}, tok)
		value = tok.value
	}
	x.Set(valueKey{}, value)
	if s.o.Scheme != "" {
		value = s.o.Scheme + " " + value
	}
	x.SetRequestHeader(s.o.Header, value)
	stage.SetCredential(x, exchange.Header{Name: s.o.Header, Value: value})
	// Records say a credential was added only once it was: not for a request a stage refused,
	// nor for one whose credential could not be had.
	added := Injected
	if s.o.Action == ActionExchange {
		added = Exchanged
	}
	x.Set(policy.CredentialKey{}, policy.Credential{Added: added, Source: s.o.Source})
	s.m.added.WithLabelValues(s.route, added).Inc()
	return exchange.Continue
}

// valueKey keeps the credential a request went upstream with, for the response's scrub.
type valueKey struct{}

// ResponseHead drops an exchanged token the server answered 401 to, so that the next request is
// exchanged afresh (once per 401: the new token is cached again).
func (s *outStage) ResponseHead(ctx context.Context, x *exchange.Exchange) exchange.Result {
	if x.Resp != nil && x.Resp.Status == http.StatusUnauthorized {
		if tok, ok := x.Get(exchangedKey{}).(*token); ok {
			s.o.Exchanger.Invalidate(tok)
			s.m.dropped.WithLabelValues(s.route).Inc()
		}
	}
	return exchange.Continue
}

// MaxScrubbedBody bounds a response body a credentials route reads to scrub it: past it the
// connection is closed (the client gets nothing of that response), never forwarded unread.
const MaxScrubbedBody = 8 << 20

// ResponseHead, on the first stage (which runs first on responses too, before Level 2 reads
// anything), takes the credential out of every response field that reflects it, and asks for the
// whole body (or the events of a stream) so that ResponseBody and Event take it out there: no
// later stage, record, rule or the client sees it. A content-encoded response cannot be read: the
// request went without Accept-Encoding, and a server that encodes anyway is cut off.
func (s *inStage) ResponseHead(ctx context.Context, x *exchange.Exchange) exchange.Result {
	v, _ := x.Get(valueKey{}).(string)
	if v == "" || x.Resp == nil {
		return exchange.Continue
	}
	reflected := strings.Contains(x.Resp.Reason, v)
	for _, h := range x.Resp.Headers {
		reflected = reflected || strings.Contains(h.Value, v)
	}
	if reflected {
		// Each field stays where it is (two Set-Cookie stay two).
		x.ReplaceInResponseHeaders(v, scrubbed)
		s.m.scrubbed.WithLabelValues(s.route).Inc()
	}
	if x.Resp.NoBody {
		return exchange.Continue
	}
	if ce, ok := x.Resp.Get("Content-Encoding"); ok && !strings.EqualFold(strings.TrimSpace(ce), "identity") && strings.TrimSpace(ce) != "" {
		s.m.refused.WithLabelValues(s.route, "encoded").Inc()
		x.Abort("response content-encoded (" + bound(ce, 32) + ") on a credentials route: it cannot be read for a reflected credential")
		return exchange.Stop
	}
	if ct, _ := x.Resp.Get("Content-Type"); isEventStream(ct) {
		x.WantEvents(0)
	} else {
		x.WantResponseBody(MaxScrubbedBody, exchange.OverflowClose)
	}
	return exchange.Continue
}

// isEventStream reports a text/event-stream media type.
func isEventStream(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}

// scrubbed stands for the credential where a response reflected it.
const scrubbed = "[credential removed by mcpintercept]"

// ResponseBody and Event take the credential out of a response body or an SSE event the server
// reflected it in: the raw value and its JSON string forms (Go's, and with "\/") are replaced.
func (s *inStage) ResponseBody(ctx context.Context, x *exchange.Exchange) exchange.Result {
	if b, ok := s.scrub(x, x.ResponseBody()); ok {
		x.SetResponseBody(b)
	}
	return exchange.Continue
}

func (s *inStage) Event(ctx context.Context, x *exchange.Exchange, ev *exchange.Event) exchange.Result {
	if b, ok := s.scrub(x, ev.Out()); ok {
		ev.Replace(b)
	}
	return exchange.Continue
}

func (s *inStage) scrub(x *exchange.Exchange, b []byte) ([]byte, bool) {
	v, _ := x.Get(valueKey{}).(string)
	if v == "" || len(b) < len(v) {
		return nil, false
	}
	forms := [][]byte{[]byte(v)}
	if j, err := json.Marshal(v); err == nil {
		js := j[1 : len(j)-1]
		for _, f := range [][]byte{js, bytes.ReplaceAll(js, []byte("/"), []byte(`\/`))} {
			if !slices.ContainsFunc(forms, func(g []byte) bool { return bytes.Equal(f, g) }) {
				forms = append(forms, f)
			}
		}
	}
	found := false
	for _, f := range forms {
		if bytes.Contains(b, f) {
			b = bytes.ReplaceAll(b, f, []byte(scrubbed))
			found = true
		}
	}
	if found {
		s.m.scrubbed.WithLabelValues(s.route).Inc()
	}
	return b, found
}

// canonicalOf is the server's canonical URI for a request (RFC 8707): https and the TLS server
// name on terminate (one of the route's exact match.sni names), http and the name DNS steering
// resolved, else the original destination's address, on plaintext. Never the client's Host
// header: the client would choose the audience of the token it gets.
func canonicalOf(c *stage.Conn) func(x *exchange.Exchange) string {
	scheme, name := "http", c.Host
	if c.TLS == "terminate" {
		scheme = "https"
		if c.SNI != "" {
			name = c.SNI
		}
	}
	if name == "" {
		name = c.Orig.Addr().Unmap().String()
	}
	port := int(c.Orig.Port())
	return func(x *exchange.Exchange) string {
		return auth.CanonicalURI(scheme, name, port, auth.TargetPath(x.Req.Target))
	}
}
