package exchange

import (
	"context"
	"time"
)

// Stage is one step of the exchange pipeline, run for every request/response exchange of a flow,
// in the order of the list given to Serve (requests) and in the same order for responses. A stage
// embeds Base and overrides only the hooks it needs, the way Envoy's stream filters implement
// only the decoder or encoder side.
//
// Every hook runs on the goroutine of its direction: the request hooks on the request side, the
// response hooks on the response side. An Exchange's request hooks all return before any of its
// response hooks run, so state a stage keeps on the Exchange (Set/Get) needs no locking between
// them.
//
// A hook returns Continue to let the exchange go on, or Stop after calling x.Answer (request side
// only: the exchange is answered locally, in the request's turn, and never forwarded) or x.Abort
// (the connection is closed after the bytes already owed). Stages after a Stop are not run for
// that hook.
type Stage interface {
	// RequestHead runs once the request head has been read, before any byte of the request is
	// forwarded. It may call x.WantRequestBody.
	RequestHead(ctx context.Context, x *Exchange) Result
	// RequestBody runs when some stage asked for the request body and it has been read in full
	// (x.RequestBody). It may replace it (x.SetRequestBody) or answer.
	RequestBody(ctx context.Context, x *Exchange) Result
	// ResponseHead runs once the final response head has been read, before it is forwarded. It
	// may call x.WantResponseBody or x.WantEvents.
	ResponseHead(ctx context.Context, x *Exchange) Result
	// ResponseBody runs when some stage asked for the response body and it was read in full
	// (x.ResponseBody). It may replace it (x.SetResponseBody).
	ResponseBody(ctx context.Context, x *Exchange) Result
	// Event runs for every event of a text/event-stream response when some stage asked for
	// events, as soon as the event's terminating blank line has arrived. It may replace the event
	// (ev.Replace) or drop it (ev.Drop). Events are forwarded one write each, never merged.
	Event(ctx context.Context, x *Exchange, ev *Event) Result
	// Done runs once per exchange, after both directions ended (or the connection ended under
	// it), on either goroutine; it must not block (hand records off). It also runs for a request
	// whose head could not be read (x.Req nil, answered 400/408/431 by the exchange itself), for
	// which no other hook ran.
	Done(x *Exchange)
}

// Result is a hook's answer.
type Result int

const (
	// Continue lets the exchange go on to the next stage and, after the last, to the peer.
	Continue Result = iota
	// Stop ends this hook's run: the stage has called x.Answer or x.Abort.
	Stop
)

// Base implements every hook as a no-op; stages embed it.
type Base struct{}

func (Base) RequestHead(context.Context, *Exchange) Result   { return Continue }
func (Base) RequestBody(context.Context, *Exchange) Result   { return Continue }
func (Base) ResponseHead(context.Context, *Exchange) Result  { return Continue }
func (Base) ResponseBody(context.Context, *Exchange) Result  { return Continue }
func (Base) Event(context.Context, *Exchange, *Event) Result { return Continue }
func (Base) Done(*Exchange)                                  {}

// Overflow is what happens to a response body a stage asked for that turns out larger than its
// bound.
type Overflow int

const (
	// OverflowClose closes the connection: the client gets nothing of that response (the default).
	OverflowClose Overflow = iota
	// OverflowForward forwards the response uninspected; x.Uninspected records it.
	OverflowForward
)

// Decision is a stage's decision as the record names it; the policy package's actions have the
// same names. The exchange package does not interpret it.
type Decision string

// The decisions a record can carry; "" is Allow.
const (
	Allow       Decision = "allow"
	Deny        Decision = "deny"
	RateLimited Decision = "rate_limited"
)

// Verdict is what a stage decided about an exchange, for the record. The exchange package does
// not interpret it beyond Status.
type Verdict struct {
	Decision   Decision      // allow, deny, rate_limited; "" is allow
	Status     int           // the HTTP status of a local answer
	Rule       string        // the rule or guard that decided
	Reason     string        // one line for the log
	RetryAfter time.Duration // for 429
}
