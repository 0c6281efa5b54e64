// Package stage is the contract between the engine, which runs flows, and the stages of a
// connection's chain, which judge its exchanges: what a stage factory gets of one connection
// (Conn), what a factory is (Factory), and the per-route options each stage owns (Options).
//
// It is a leaf below the engine and every stage package, so that neither imports the other: the
// engine runs whatever chain it is given (engine.Options.Stages), each stage's constructor lives
// in the package of its feature and reads its own options type, and package chain holds the one
// ordered list (CoreDNS's plugin.cfg is the shape).
package stage

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/origin"
	"mcpintercept/policy"
	"mcpintercept/telemetry"
)

// Factory is one entry of a chain: a named stage, the awareness levels it serves, and its
// constructor, called once per connection (stages keep per-connection state). New returns nil
// when the stage has nothing to do on that connection (its route does not ask for it).
type Factory struct {
	Name   string
	Levels func(level int) bool
	New    func(c *Conn) exchange.Stage
}

// FromLevel serves levels n and above; OnlyLevel level n alone.
func FromLevel(n int) func(int) bool { return func(l int) bool { return l >= n } }
func OnlyLevel(n int) func(int) bool { return func(l int) bool { return l == n } }

// Options are a route's per-stage options, by stage name: each stage package reads its own
// type from it (Get), and the appliance fills it from the configuration. A route without an
// entry for a stage leaves that stage off, or at its defaults, as the stage says.
type Options map[string]any

// Get is the options of type T a route set for stage name, and whether it set them. Options of
// another type under that name are a programming error (a value where the stage takes a
// pointer, another stage's type): Get panics rather than turn the stage off in silence.
func Get[T any](o Options, name string) (T, bool) {
	v, ok := o[name]
	if !ok {
		var zero T
		return zero, false
	}
	t, ok := v.(T)
	if !ok {
		var want T
		panic(fmt.Sprintf("stage %s: options are %T, want %T", name, v, want))
	}
	return t, true
}

// RuleSet is a compiled rule set as the stages evaluate it (policy.Set, counting shadow rules).
type RuleSet interface {
	Evaluate(in *policy.Input) policy.Decision
	Needs() policy.Needs
}

// Conn is one connection as the stages of its chain see it: what the engine learnt of the flow
// (addresses, names, the process and pod behind it), the route it took and that route's options,
// its rule set, where its records go, and the services the engine offers a stage (a rate-limited
// warning, a request of its own to the flow's server, hooks at the flow's end). The engine fills
// it once per connection before the chain is built; stages read its fields, and change it only
// through Shared and OnEnd.
type Conn struct {
	ID  string // the flow log's id
	Num uint64 // the flow's number (audit records)

	Route   string  // the route's name
	Level   int     // the route's level (1 or 2)
	TLS     string  // the disposition: passthrough, terminate, plaintext
	Options Options // the route's per-stage options

	Client    netip.AddrPort
	Orig      netip.AddrPort // the original destination (the address dialled, for a DNS name)
	Host      string         // the name the client resolved, when DNS steering delivered the flow
	SNI       string         // the TLS server name ("" in plaintext, or none sent)
	Mechanism string
	Identity  *origin.Identity // the process behind the connection (eBPF), nil unknown

	// ClientVars and ConnVars are policy's `client` and `conn` variables, built once (nil at
	// Level 1 on a route without a rule set: nothing evaluates them).
	ClientVars *policy.Client
	ConnVars   *policy.Conn
	// Rules is the rule set that judges the flow now (nil func: the route names none; a nil
	// result: allow), FailOpen the route's on_rule_error: open, and RuleErrors what a stage calls
	// with a decision whose rules failed to evaluate (counted and logged).
	Rules      func() RuleSet
	FailOpen   bool
	RuleErrors func(*policy.Decision)

	// Upstream is the connection to the server (the TLS session when one was originated).
	Upstream net.Conn
	// Post sends one HTTP/1.1 request to the flow's server over a new upstream connection
	// (dialled and verified as the flow's own) and reads its response; not 2xx is an error.
	// Level 2 only (nil below).
	Post func(ctx context.Context, target string, headers []exchange.Header, body []byte) error

	// Record is the flow's part of every record (Level 2 only), Records the flow's record
	// writer: a stage that writes records of its own (Level 2, per JSON-RPC message) writes
	// them there.
	Record  telemetry.FlowRecord
	Records telemetry.FlowRecorder

	// Ctx is the flow's: done when the drain deadline cuts it. Idled reports that the idle watch
	// closed the flow. Warn logs at most once a second per key (the rest counted).
	Ctx   context.Context
	Idled func() bool
	Warn  func(key, msg string, args ...any)

	mu     sync.Mutex // values; mk may call OnEnd, which takes endsMu
	values map[any]any
	endsMu sync.Mutex
	ends   []func(reason string)
}

// Shared is the connection's value under key, made by mk the first time any stage asks: how two
// stages of one connection share state (the audit writer Level 1 and Level 2 write through).
func (c *Conn) Shared(key any, mk func() any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.values[key]; ok {
		return v
	}
	if c.values == nil {
		c.values = map[any]any{}
	}
	v := mk()
	c.values[key] = v
	return v
}

// OnEnd runs fn once the connection's exchanges are over, before its record is written, with
// why it ended ("closed", or "shutdown" when the drain deadline cut it).
func (c *Conn) OnEnd(fn func(reason string)) {
	c.endsMu.Lock()
	c.ends = append(c.ends, fn)
	c.endsMu.Unlock()
}

// End runs the OnEnd hooks, in the order they were added; the engine calls it once.
func (c *Conn) End(reason string) {
	c.endsMu.Lock()
	ends := c.ends
	c.ends = nil
	c.endsMu.Unlock()
	for _, fn := range ends {
		fn(reason)
	}
}

// EndFlow ends what stages keep open past their exchanges (Level 2's server→client requests the
// client never answered): every stage with an EndFlow method.
func EndFlow(stages []exchange.Stage, at time.Time) {
	for _, s := range stages {
		if ef, ok := s.(interface{ EndFlow(time.Time) }); ok {
			ef.EndFlow(at)
		}
	}
}

// recordedKey marks an exchange whose messages a stage recorded itself.
type recordedKey struct{}

// MarkRecorded says that a stage wrote (or will write) the records of x's messages (Level 2, one
// per JSON-RPC message), so the per-HTTP-request record and span are redundant.
func MarkRecorded(x *exchange.Exchange) { x.Set(recordedKey{}, true) }

// Recorded reports MarkRecorded.
func Recorded(x *exchange.Exchange) bool { v, _ := x.Get(recordedKey{}).(bool); return v }

// Span is a request's span as records name it.
type Span interface {
	TraceID() string
	SpanID() string
}

// spanKey keeps an exchange's Span.
type spanKey struct{}

// SetSpan names x's span (the trace stage's, at Level 1): the audit and record stages after it
// put its ids on their records.
func SetSpan(x *exchange.Exchange, s Span) { x.Set(spanKey{}, s) }

// SpanOf is x's span (nil: none).
func SpanOf(x *exchange.Exchange) Span { s, _ := x.Get(spanKey{}).(Span); return s }

// credentialKey keeps the credential header a credentials route put on an exchange's forwarded
// request.
type credentialKey struct{}

// SetCredential says which header field the request went upstream with in place of the client's
// credential (the credentials stage's, after it added it): a request of the appliance's own to
// the same server on the client's behalf (Level 2 answering a server request) carries that one,
// never the client's.
func SetCredential(x *exchange.Exchange, h exchange.Header) { x.Set(credentialKey{}, h) }

// CredentialOf is SetCredential's header (ok false: the route adds none).
func CredentialOf(x *exchange.Exchange) (exchange.Header, bool) {
	h, ok := x.Get(credentialKey{}).(exchange.Header)
	return h, ok
}
