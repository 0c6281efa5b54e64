package telemetry

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// LiveLine is the one-line view of a record that `mcpintercept exec` prints on stderr as each
// request ends: who, what, how it went.
func LiveLine(r FlowRecord) string {
	who := "?"
	if r.Process != nil {
		who = fmt.Sprintf("%s[%d]", r.Process.Comm, r.Process.PID)
	}
	if r.Level == 0 {
		return fmt.Sprintf("mcpintercept: %s %s connection to %s (%s) %dB up %dB down, %s %s",
			who, orDash(r.TLS), r.OrigDst, orDash(r.SNI), r.BytesUp, r.BytesDown, r.Decision, r.Reason)
	}
	what := r.MCPMethod
	if what == "" {
		what = r.HTTPMethod + " " + r.Path
	}
	if r.MCPName != "" {
		what += " " + r.MCPName
	}
	if r.Direction == "server_to_client" {
		what = "server: " + what
	}
	status := "-"
	if r.Status != 0 {
		status = fmt.Sprint(r.Status)
	}
	line := fmt.Sprintf("mcpintercept: %s %s -> %s %s %dms %s", who, what, r.OrigDst, status, r.DurationMS, r.Decision)
	if r.Decision != "allow" && r.Rule != "" {
		line += " (" + r.Rule + ")"
	}
	return line
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type summaryKey struct{ process, method, name string }

type summaryRow struct {
	requests, denied, limited, failed int
	total                             time.Duration
}

// Summary aggregates requests by process, MCP method and tool for the table `exec` prints at
// exit. It is safe for concurrent use.
type Summary struct {
	mu   sync.Mutex
	rows map[summaryKey]*summaryRow
}

// Add counts one record. Opaque connections are counted under their TLS disposition.
func (s *Summary) Add(r FlowRecord) {
	k := summaryKey{process: "?", method: r.MCPMethod, name: r.MCPName}
	if r.Process != nil {
		k.process = r.Process.Comm
	}
	if r.Level == 0 {
		k.method = "(connection " + orDash(r.TLS) + ")"
	} else if k.method == "" {
		k.method = "(http " + r.HTTPMethod + ")"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows == nil {
		s.rows = map[summaryKey]*summaryRow{}
	}
	row := s.rows[k]
	if row == nil {
		row = &summaryRow{}
		s.rows[k] = row
	}
	row.requests++
	switch r.Decision {
	case "deny":
		row.denied++
	case "rate_limited":
		row.limited++
	}
	if r.Status >= 400 || (r.Level > 0 && r.Status == 0) {
		row.failed++
	}
	row.total += time.Duration(r.DurationMS) * time.Millisecond
}

// Len is the number of rows (0: nothing was intercepted).
func (s *Summary) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rows)
}

// WriteTable prints the table, sorted by process, method and tool.
func (s *Summary) WriteTable(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.rows) == 0 {
		fmt.Fprintln(w, "mcpintercept: no intercepted traffic")
		return
	}
	keys := make([]summaryKey, 0, len(s.rows))
	for k := range s.rows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.process != b.process {
			return a.process < b.process
		}
		if a.method != b.method {
			return a.method < b.method
		}
		return a.name < b.name
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tMETHOD\tTOOL\tCOUNT\tDENIED\tRATE-LIMITED\tFAILED\tAVG MS")
	for _, k := range keys {
		r := s.rows[k]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\n", k.process, k.method, orDash(k.name),
			r.requests, r.denied, r.limited, r.failed, (r.total / time.Duration(r.requests)).Milliseconds())
	}
	tw.Flush()
	fmt.Fprintln(w, strings.Repeat("-", 20))
}
