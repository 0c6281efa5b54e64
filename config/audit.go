package config

import (
	"fmt"
	"path/filepath"
	"time"
)

// AuditConfig is the durable audit store of audited routes: an append-only, hash-chained log in
// Dir, signed checkpoints beside it. It is opened only when some route has `audit: true`.
type AuditConfig struct {
	// Dir holds the segments, the checkpoints and the signing key. Parse defaults it to "audit"
	// beside ca.dir (the appliance's state directory) and resolves a relative path like ca.dir.
	Dir string `yaml:"dir"`
	// Fail is what an audited request gets when its record cannot be made durable:
	// AuditFailClosed refuses it, AuditFailOpen forwards it and counts it unrecorded.
	Fail string `yaml:"fail"`
	// Timeout bounds how long a record may take to become durable before it counts as failed.
	Timeout Duration `yaml:"timeout"`
	// SegmentBytes is the size after which the log moves to a new segment file.
	SegmentBytes int64 `yaml:"segment_bytes"`
	// RetainSegments keeps at most that many segment files (0: all); RetainAge deletes segments
	// older than it (0: never). The chain survives either: a segment starts from the previous head.
	RetainSegments int      `yaml:"retain_segments"`
	RetainAge      Duration `yaml:"retain_age"`
	// CheckpointEvery is how often the log's head is signed.
	CheckpointEvery Duration `yaml:"checkpoint_every"`
}

// Values of AuditConfig.Fail.
const (
	AuditFailClosed = "closed"
	AuditFailOpen   = "open"
)

// Defaults of the audit section.
const (
	DefaultAuditTimeout         = 2 * time.Second
	DefaultAuditSegmentBytes    = 64 << 20
	DefaultAuditCheckpointEvery = time.Second
)

// Bounds of the audit section: a segment under 64 KiB would rotate on every burst; a timeout
// under a millisecond is shorter than one fdatasync on any disk.
const (
	minAuditSegmentBytes = 64 << 10
	maxAuditSegmentBytes = 1 << 40
	maxRetainSegments    = 1_000_000
)

// auditDirBeside is audit.dir's default: "audit" in the directory that holds ca.dir, the
// appliance's state directory (/var/lib/mcpintercept by default).
func auditDirBeside(c *Config) (string, bool) {
	if c.CA.Dir == "" {
		return "", false
	}
	return filepath.Join(filepath.Dir(c.CA.Dir), "audit"), true
}

func checkAuditSegmentBytes(n int64) string {
	if n < minAuditSegmentBytes || n > maxAuditSegmentBytes {
		return fmt.Sprintf("must be between 64KiB (%d) and 1TiB, got %d", int64(minAuditSegmentBytes), n)
	}
	return ""
}

func checkRetainSegments(n int64) string { return between(n, 0, maxRetainSegments) }

// Audited reports whether some route (default_route included) is audited: only then is the
// store opened.
func (c *Config) Audited() bool {
	for _, r := range c.Routes {
		if r.Audit {
			return true
		}
	}
	return c.DefaultRoute != nil && c.DefaultRoute.Route != nil && c.DefaultRoute.Route.Audit
}

// auditRoute relates a route's audit keys to its level and to the audit section.
func (v *validator) auditRoute(c *Config, key string, r Route, levelOK bool) {
	level := r.LevelOrDefault()
	switch {
	case r.AuditArguments && !r.Audit:
		v.check(key+".audit_arguments", "needs audit: true on the route (arguments are recorded in its audit records)")
	case r.AuditArguments && levelOK && level < 2:
		v.checkAlt(key+".audit_arguments", key+".level", "needs level 2: arguments are in the body, which is not read below it")
	}
	if !r.Audit {
		return
	}
	if levelOK && level < 1 {
		v.checkAlt(key+".audit", key+".level", fmt.Sprintf("needs level 1: a level %d route reads no request to record", level))
	}
	if c.Audit.Dir == "" {
		v.checkAlt(key+".audit", "audit.dir", "needs audit.dir: the directory the audit log is written to")
	}
}
