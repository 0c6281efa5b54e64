package level1

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// The tests of this package were written against level1.Proxy, the state machine that is now
// exchange.Serve running Level 1's stages. Proxy below is that pairing, with a stage that asks a
// Decider (the tests' policy) and one that hands each exchange to a Recorder in the shape the
// tests assert on, so that every assertion they make still holds of the stages unchanged.

type (
	Head           = exchange.Head
	MalformedError = exchange.MalformedError
	RequestInfo    = mcp.Info
)

const (
	KindMCP             = mcp.KindMCP
	KindHTTP            = mcp.KindHTTP
	TransportStreamable = mcp.TransportStreamable
	TransportSSEStream  = mcp.TransportSSEStream
	TransportSSEPost    = mcp.TransportSSEPost
)

func InfoOf(x *exchange.Exchange) *RequestInfo { return mcp.InfoOf(x) }

func NewReader(r io.Reader, l Limits) *exchange.Reader { return exchange.NewReader(r, l) }

const (
	ActionAllow       = policy.ActionAllow
	ActionDeny        = policy.ActionDeny
	ActionRateLimited = policy.ActionRateLimited
)

// Verdict is a Decider's answer, as the old Proxy took it.
type Verdict struct {
	Action     policy.Action
	Status     int
	Reason     string
	Rule       string
	RetryAfter time.Duration
}

type Decider interface {
	Decide(ctx context.Context, info *RequestInfo) Verdict
}

// Exchange is the record the old Proxy gave its Recorder.
type Exchange struct {
	Info               *RequestInfo
	Verdict            Verdict
	Status             int
	BytesUp, BytesDown int64
	Start              time.Time
	Duration           time.Duration
	Err                string
	Upgraded           string
}

type Recorder interface {
	Record(ex *Exchange)
}

// Proxy is exchange.Serve with Level 1's classifier and a stage that asks d, then one that
// records into rec.
func Proxy(ctx context.Context, client, upstream net.Conn, d Decider, rec Recorder, o Options, log *slog.Logger) error {
	stages := []exchange.Stage{NewClassifier(o.Guards()), deciderStage{d: d}, recorderStage{rec: rec}}
	return exchange.Serve(ctx, client, upstream, stages, o.Exchange(), log)
}

type deciderStage struct {
	exchange.Base
	d Decider
}

func (s deciderStage) RequestHead(ctx context.Context, x *exchange.Exchange) exchange.Result {
	if s.d == nil {
		return exchange.Continue
	}
	v := s.d.Decide(ctx, InfoOf(x))
	ev := exchange.Verdict{Decision: exchange.Decision(v.Action), Status: v.Status, Reason: v.Reason, Rule: v.Rule, RetryAfter: v.RetryAfter}
	switch v.Action {
	case "", ActionAllow:
		ev.Decision = exchange.Allow
		x.Verdict = ev
		return exchange.Continue
	case ActionRateLimited:
		if ev.Status < 400 || ev.Status > 599 {
			ev.Status = http.StatusTooManyRequests
		}
	default:
		if ev.Status < 400 || ev.Status > 599 {
			ev.Status = http.StatusForbidden
		}
	}
	return refuse(x, ev)
}

type recorderStage struct {
	exchange.Base
	rec Recorder
}

func (s recorderStage) Done(x *exchange.Exchange) {
	if s.rec == nil {
		return
	}
	info := InfoOf(x)
	if info == nil {
		info = &RequestInfo{Kind: KindHTTP}
	}
	v := x.Verdict
	if v.Decision == "" {
		v.Decision = exchange.Allow
	}
	s.rec.Record(&Exchange{
		Info:    info,
		Verdict: Verdict{Action: policy.Action(v.Decision), Status: v.Status, Reason: v.Reason, Rule: v.Rule, RetryAfter: v.RetryAfter},
		Status:  x.Status, BytesUp: x.BytesUp, BytesDown: x.BytesDown,
		Start: x.Start, Duration: x.Duration, Err: x.Err, Upgraded: x.Upgraded,
	})
}

// Options are the exchange loop's and the guards' settings of one test proxy (the engine builds
// them itself: exchange.Options from the appliance, Guards from the route).
type Options struct {
	Limits Limits
	// HeaderTimeout, IdleTimeout, MaxDeniedBody and BodyTimeout are exchange.Options'.
	HeaderTimeout time.Duration
	IdleTimeout   time.Duration
	MaxDeniedBody int64
	BodyTimeout   time.Duration
	// AllowUpgrade, StrictMCPHeaders and ExpectedHost are Guards'.
	AllowUpgrade     []string
	StrictMCPHeaders bool
	ExpectedHost     string
}

// Exchange returns the options of the exchange loop.
func (o Options) Exchange() exchange.Options {
	return exchange.Options{Limits: o.Limits, HeaderTimeout: o.HeaderTimeout, IdleTimeout: o.IdleTimeout,
		MaxDeniedBody: o.MaxDeniedBody, BodyTimeout: o.BodyTimeout}
}

// Guards returns the options of the classification stage.
func (o Options) Guards() Guards {
	return Guards{RouteOptions: RouteOptions{AllowUpgrade: o.AllowUpgrade, StrictMCPHeaders: o.StrictMCPHeaders}, ExpectedHost: o.ExpectedHost}
}

// Stages is the Level 1 stage list of one test connection: classification with its guards, then
// header policy (chain.Stages is the appliance's, with every stage between).
func Stages(g Guards, f *Flow) []exchange.Stage {
	return []exchange.Stage{NewClassifier(g), NewHeaderPolicy(f)}
}
