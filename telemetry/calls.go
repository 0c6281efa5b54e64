package telemetry

import (
	"sort"
	"strings"

	"mcpintercept/mcp"
)

// CallCounts is `mcpintercept observe --top`: tools/call requests per client address (and
// process) × tool, their denials, and the latency distribution.
type CallCounts struct {
	rows map[[2]string]*callRow
}

type callRow struct {
	calls, denied int
	ms            []int64
}

// NewCallCounts is an empty table.
func NewCallCounts() *CallCounts { return &CallCounts{rows: map[[2]string]*callRow{}} }

// Add counts r when it is a client's tools/call.
func (s *CallCounts) Add(r *FlowRecord) {
	if r.MCPMethod != mcp.MethodToolsCall || r.Direction == ServerToClient {
		return
	}
	client := r.Client
	if i := strings.LastIndexByte(client, ':'); i >= 0 {
		client = strings.Trim(client[:i], "[]")
	}
	if r.Process != nil {
		client += " " + r.Process.Comm
	}
	k := [2]string{client, r.MCPName}
	row := s.rows[k]
	if row == nil {
		row = &callRow{}
		s.rows[k] = row
	}
	row.calls++
	if Denied(r.Decision) {
		row.denied++
	}
	row.ms = append(row.ms, r.DurationMS)
}

// CallRow is one client × tool of CallCounts.
type CallRow struct {
	Client, Tool  string
	Calls, Denied int
	P50MS, P99MS  int64
}

// Rows are the table's rows, most calls first (then by client and tool).
func (s *CallCounts) Rows() []CallRow {
	keys := make([][2]string, 0, len(s.rows))
	for k := range s.rows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := s.rows[keys[i]], s.rows[keys[j]]
		if a.calls != b.calls {
			return a.calls > b.calls
		}
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	out := make([]CallRow, 0, len(keys))
	for _, k := range keys {
		r := s.rows[k]
		sort.Slice(r.ms, func(i, j int) bool { return r.ms[i] < r.ms[j] })
		out = append(out, CallRow{Client: k[0], Tool: k[1], Calls: r.calls, Denied: r.denied,
			P50MS: percentile(r.ms, 0.5), P99MS: percentile(r.ms, 0.99)})
	}
	return out
}

func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}
