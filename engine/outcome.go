package engine

import (
	"time"

	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
)

// outcome is how a flow ended, as the branch of the pipeline that ended it saw it. Branches
// return one and do nothing else about the end: the flow's exit (Engine.exit) alone closes what
// is left, counts the metrics and writes the record.
type outcome struct {
	tls      Disposition
	level    int
	decision policy.Action
	rule     string
	reason   string
	up, down int64 // bytes forwarded each way

	// reset ends the client with a reset (SO_LINGER 0) instead of an orderly close: what a
	// refused flow, or an upstream that could not be reached, gets, as a direct connection would.
	reset bool
	// refused is the FlowsRefused label of a refusal; upstreamErr the UpstreamErrors label
	// ("dial", "tls", "reset") of a failure on the upstream side.
	refused, upstreamErr string
	// recorded: Level 1/2 wrote the flow's records itself, one per exchange or message.
	recorded bool
}

// refusal is a flow the appliance refused: denied in rule's name, reset, counted under label.
func refusal(d Disposition, rule, reason, label string) outcome {
	return outcome{tls: d, decision: policy.ActionDeny, rule: rule, reason: reason, reset: true, refused: label}
}

// upstreamFailure is a flow whose original destination could not be reached or spoken to; the
// client gets the reset a direct connection would have given it. Nothing was refused.
func upstreamFailure(d Disposition, rule, reason, label string) outcome {
	return outcome{tls: d, decision: policy.ActionAllow, rule: rule, reason: reason, reset: true, upstreamErr: label}
}

// forwarded is a flow that was let through (or ended before there was anything to judge).
func forwarded(d Disposition, level int, rule, reason string) outcome {
	return outcome{tls: d, level: level, decision: policy.ActionAllow, rule: rule, reason: reason}
}

// relayed is a forwarded flow whose bytes were relayed until both sides ended.
func relayed(d Disposition, rule string, up, down int64, reason string, reset bool) outcome {
	o := forwarded(d, 0, rule, reason)
	o.up, o.down = up, down
	if reset {
		o.upstreamErr = "reset"
	}
	return o
}

// exit is the one way out of every flow: it closes what is left (the client with a reset when
// the outcome says so, the upstream), counts the outcome and writes the flow's record, unless
// Level 1/2 wrote one per exchange already.
func (e *Engine) exit(f *flow, out outcome) {
	if out.reset {
		f.c.SetLinger(0)
	}
	f.c.Close()
	if f.up != nil {
		f.up.Close()
	}

	end := telemetry.FlowEnd{Refused: out.refused, UpstreamErr: out.upstreamErr, Up: out.up, Down: out.down,
		Duration: time.Since(f.start), Dispatched: f.dispatched}
	if out.recorded {
		e.rec.End(end)
		return
	}
	rec := f.record()
	rec.TLS, rec.Level = string(out.tls), out.level
	rec.Decision, rec.Rule, rec.Reason = string(out.decision), out.rule, out.reason
	if out.level == 0 && f.dispatched {
		// Opaque, passthrough, refused at the connection: the flow is its one call.
		if e.opt.ConnSpan != nil {
			c := stage.Conn{Route: f.route, TLS: string(out.tls), Client: f.client, Orig: f.orig, Host: f.origin.Host,
				SNI: f.sniName, Mechanism: f.origin.Mechanism, Identity: f.origin.Identity}
			rec.TraceID, rec.SpanID = e.opt.ConnSpan(&c, f.start, string(out.decision), out.rule, out.reason)
		}
	}
	e.rec.Flow(&rec, end)
}
