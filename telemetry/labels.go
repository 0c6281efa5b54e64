package telemetry

import (
	"strings"
	"sync"
)

// LabelCap bounds the distinct values one metric label may take. Values come from clients
// (Mcp-Name, addresses): without a bound, one client sending random tool names would grow the
// registry without limit; without cleaning, a byte that is not UTF-8 would make the Prometheus
// client panic. Past the cap, new values are reported as "other".
type LabelCap struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

// NewLabelCap allows max distinct values.
func NewLabelCap(max int) *LabelCap { return &LabelCap{max: max, seen: map[string]struct{}{}} }

// Value returns v cleaned (valid UTF-8, at most 128 bytes) or "other" once the cap is reached.
func (c *LabelCap) Value(v string) string {
	if len(v) > 128 {
		v = v[:128]
	}
	v = strings.ToValidUTF8(v, "\uFFFD")
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[v]; ok {
		return v
	}
	if len(c.seen) >= c.max {
		return "other"
	}
	c.seen[v] = struct{}{}
	return v
}
