// Package audit is the durable, tamper-evident record of judged MCP calls.
//
// The log is a directory of segment files (audit-<first seq>.jsonl), one
// canonical JSON record per line. Every record carries seq (1, 2, ...) and
// prev, the SHA-256 of the previous record's line (64 zero digits for the
// first), so the chain runs across segments and restarts. Append returns
// only once its record is fdatasync'd; concurrent Appends share one write and
// one sync (group commit). A record that cannot be made durable fails with
// ErrUnavailable, and the caller refuses the call it was for.
//
// Every CheckpointEvery, and at Close, the head is signed with the store's
// Ed25519 key as a C2SP checkpoint (a signed note): origin, count of records,
// base64 hash of the last record's line, a "start" extension line (the first
// seq the log holds and the hash of the record before it) and a "time" one.
// The hash is the chain head, not a Merkle root: a checkpoint proves the
// prefix of that length, which is what verification against a copy kept
// elsewhere needs, but it gives no inclusion proofs. The start line is what
// makes deleting the oldest records visible: a checkpoint commits to every
// record from its start, and retention signs a checkpoint with the new start
// before it deletes a segment.
//
// Verify and Query read a directory offline, without a Store.
package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config: zero values take the defaults in parentheses.
type Config struct {
	Dir             string        // required; created 0700
	Timeout         time.Duration // a record not durable within it fails with ErrUnavailable (2s)
	SegmentBytes    int64         // rotate after this many bytes (64 MiB)
	RetainSegments  int           // keep at most this many segment files, 0 = all
	RetainAge       time.Duration // delete segments older than this, 0 = never
	CheckpointEvery time.Duration // (1s)
}

// Defaults of Config's zero values.
const (
	DefaultTimeout         = 2 * time.Second
	DefaultSegmentBytes    = 64 << 20
	DefaultCheckpointEvery = time.Second
)

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.CheckpointEvery <= 0 {
		c.CheckpointEvery = DefaultCheckpointEvery
	}
	return c
}

// Decision is the policy verdict an authorization record carries.
type Decision string

// The decisions a record may carry, spelled as the flow log's (and policy's) are.
const (
	Allow       Decision = "allow"
	Deny        Decision = "deny"
	RateLimited Decision = "rate_limited"
)

// LegacyRateLimited is how records written before the one spelling carry RateLimited; Canonical
// reads it as RateLimited, so a filter selects both.
const LegacyRateLimited Decision = "ratelimited"

// Canonical is d in its one spelling (LegacyRateLimited and rate_limit are RateLimited).
func (d Decision) Canonical() Decision {
	if d == LegacyRateLimited || d == "rate_limit" {
		return RateLimited
	}
	return d
}

// ParseDecision reads a --decision value: allow, deny or rate_limited (rate_limit and ratelimited
// taken for it); anything else is an error naming the valid values.
func ParseDecision(s string) (Decision, error) {
	switch d := Decision(strings.ToLower(strings.TrimSpace(s))).Canonical(); d {
	case Allow, Deny, RateLimited:
		return d, nil
	}
	return "", fmt.Errorf("decision %q: want allow, deny or rate_limited", s)
}

// The kinds of record.
const (
	KindAuthorization = "authorization"
	KindOutcome       = "outcome"
)

// Record is one line of the log; the store fills Seq, Prev and Time.
type Record struct {
	Seq  uint64    // 1 for the first record ever written
	Prev string    // hex SHA-256 of the previous record's line
	Time time.Time // when it was committed, UTC, millisecond precision

	Kind          string // "authorization" | "outcome"
	Flow          uint64
	Exchange      uint64          // per-flow exchange number
	Client        string          // client ip:port
	Identity      *Identity       // process identity when eBPF knows it (nil otherwise)
	Iss, Sub      string          // the caller an accepted bearer token names (maybe hashed)
	Destination   string          // original destination ip:port
	Server        string          // server name (SNI/Host)
	Level         int             // 1 or 2
	Method        string          // JSON-RPC method (Level 2) or HTTP method + path (Level 1)
	Direction     string          // "client_to_server" | "server_to_client"
	ID            string          // JSON-RPC id as its JSON text
	Tool          string          // tools/call name, prompts/get name, resources/read uri
	ArgsHash      string          // "sha256:<hex>" of the canonical (RFC 8785) arguments
	Arguments     json.RawMessage // only when the route asks, already redacted
	Rule          string
	Decision      Decision
	Outcome       string // outcome records: "result" | "error" | "denied" | "uncertain"
	ErrorCode     int64
	Reason        string // uncertain: "timeout" | "reset" | "oversized" | "malformed" | "shutdown" ...
	Authorization uint64 // outcome records: Seq of their authorization record
	Traceparent   string // the W3C trace context the client sent (params._meta's, else the header's)
	// TraceID and SpanID are the appliance's own span of the call (lower-case hex; "" when
	// tracing is off), so that the audit log and the trace backend name one call alike.
	TraceID, SpanID string
}

// Identity is the process behind a connection, when eBPF knows it.
type Identity struct {
	PID, UID  uint32
	Comm, Exe string
	Cgroup    uint64
}

// Receipt identifies a durable record.
type Receipt struct {
	Seq  uint64
	Hash string // hex SHA-256 of the record's line
}

// ErrUnavailable means a record could not be made durable; the error
// returned wraps it and the cause (disk full, I/O error, timeout, closed).
var ErrUnavailable = errors.New("audit unavailable")

// OutcomeOf is the outcome record of authorization a, whose seq is seq: the call's identity
// (exchange, level, method, direction, id, tool, rule, decision, trace) copied, the flow's
// fields left for the writer to fill.
func OutcomeOf(a *Record, seq uint64, outcome, reason string) *Record {
	return &Record{Kind: KindOutcome, Exchange: a.Exchange, Server: a.Server, Level: a.Level, Method: a.Method,
		Direction: a.Direction, ID: a.ID, Tool: a.Tool, Rule: a.Rule, Decision: a.Decision,
		Outcome: outcome, Reason: reason, Authorization: seq, Traceparent: a.Traceparent,
		TraceID: a.TraceID, SpanID: a.SpanID}
}
