// Package audit is the durable, tamper-evident record of tool calls: an
// append-only, hash-chained segment log whose head is periodically signed as
// a C2SP checkpoint, and the offline tools that verify and query it.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
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

// Decision is the policy verdict an authorization record carries.
type Decision string

// The decisions a record may carry.
const (
	Allow       Decision = "allow"
	Deny        Decision = "deny"
	RateLimited Decision = "ratelimited"
)

// Record is one line of the log; the store fills Seq, Prev and Time.
type Record struct {
	Seq  uint64
	Prev string
	Time time.Time

	Kind          string // "authorization" | "outcome"
	Flow          uint64
	Exchange      uint64    // per-flow exchange number
	Client        string    // client ip:port
	Identity      *Identity // process identity when eBPF knows it (nil otherwise)
	Destination   string    // original destination ip:port
	Server        string    // server name (SNI/Host)
	Level         int       // 1 or 2
	Method        string    // JSON-RPC method (Level 2) or HTTP method + path (Level 1)
	Direction     string    // "client_to_server" | "server_to_client"
	ID            string    // JSON-RPC id as its JSON text
	Tool          string    // tools/call name, prompts/get name, resources/read uri
	ArgsHash      string    // "sha256:<hex>" of the canonical (RFC 8785) arguments
	Arguments     json.RawMessage
	Rule          string
	Decision      Decision
	Outcome       string // outcome records: "result" | "error" | "denied" | "uncertain"
	ErrorCode     int64
	Reason        string // uncertain: "timeout" | "reset" | "oversized" | "malformed" | "shutdown" ...
	Authorization uint64 // outcome records: Seq of their authorization record
	Traceparent   string
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
	Hash string
}

// ErrUnavailable means a record could not be made durable; it wraps the cause.
var ErrUnavailable = errors.New("audit unavailable")

// Store is an open audit log.
type Store struct{}

// Open opens (creating if needed) the store in cfg.Dir.
func Open(cfg Config, log *slog.Logger) (*Store, error) {
	return nil, errors.New("audit: not implemented")
}

// Append makes r durable and returns its receipt.
func (s *Store) Append(ctx context.Context, r *Record) (Receipt, error) {
	return Receipt{}, ErrUnavailable
}

// Ready reports whether the store is open and writable.
func (s *Store) Ready() error { return ErrUnavailable }

// Checkpoint returns the latest signed checkpoint.
func (s *Store) Checkpoint() []byte { return nil }

// PublicKey returns the note verifier key line.
func (s *Store) PublicKey() string { return "" }

// Close writes a final checkpoint and closes the store.
func (s *Store) Close(ctx context.Context) error { return nil }

// HashArguments returns "sha256:<hex>" of the RFC 8785 canonical form of raw.
func HashArguments(raw json.RawMessage) (string, error) {
	return "", errors.New("audit: not implemented")
}
