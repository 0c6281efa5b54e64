package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"mcpintercept/admin"
	"mcpintercept/telemetry"
)

const observeUsageText = `usage: mcpintercept observe [CONNECTION] [--client C] [--tool T] [--decision D] [--route R]
                           [--since DUR|RFC3339] [--all] [-o text|json] [--top]
                           [--no-follow | --last N | --for DUR]

Follows a running appliance's decisions live, from its admin listener's GET /observe (which needs
the admin token). One line per MCP message: time, client (and process), server, method, tool,
decision, rule, latency. Stops on Ctrl-C, after --for, or with --no-follow/--last once the
recent records are printed (exit 0); exits 1 when the appliance ends the stream (a reader that
falls behind is dropped: the reason is printed) or cannot be reached.

` + recordFilterUsage + `  --route R        the route the connection takes
  --no-follow      print the recent records that match (the appliance keeps the last 1024; all
                   of them, or those from --since on), then exit
  --last N         only the last N of those (implies --no-follow)
  --for DUR        follow for this long, then exit 0 (with --top: print the table then)

CONNECTION (the appliance's admin listener):
  --config FILE      the appliance's configuration: the admin URL from admin.listen, the token from
                     tool_integrity.dir/admin.token
  --admin URL        the admin listener (default http://127.0.0.1:9464)
  --token-file FILE  the admin token (default /var/lib/mcpintercept/tools/admin.token)
`

// recordFilterUsage is the filters and outputs observe and log share.
const recordFilterUsage = `  --client C       an address, address:port, prefix (10.0.0.0/24) or process name
  --tool T         the tool (or prompt, resource) name
  --decision D     allow, deny, rate_limited, would_deny, would_rate_limit (comma-separated;
                   would_*: what a shadow rule would have decided; rate_limit and ratelimited
                   are taken for rate_limited)
  --since S        records from S on: a duration back from now (10m) or an RFC 3339 time
  --all            flows and HTTP exchanges too, not only JSON-RPC messages
  -o text|json     text (default) or the records as JSON lines (the flow log's keys)
  --top            no record lines: calls per client × tool, denials and p50/p99 latency of
                   tools/call, printed at the end
`

// recordFlags are the filters and outputs observe and log share.
type recordFlags struct {
	client, tool, decision, since, until, output string
	top, all                                     bool
	last                                         int
}

// add defines the shared flags on fs (--until only for log: a live stream has no end).
func (r *recordFlags) add(fs *flag.FlagSet, until bool) {
	fs.StringVar(&r.client, "client", "", "client address, prefix or process name")
	fs.StringVar(&r.tool, "tool", "", "tool name")
	fs.StringVar(&r.decision, "decision", "", "decisions (comma-separated): "+telemetry.DecisionFilterValues)
	fs.StringVar(&r.since, "since", "", "records from a duration ago (10m) or an RFC 3339 time on")
	if until {
		fs.StringVar(&r.until, "until", "", "records before a duration ago (10m) or an RFC 3339 time")
	}
	fs.StringVar(&r.output, "o", "text", "text or json")
	fs.BoolVar(&r.top, "top", false, "summary: calls per client × tool, denials, latency")
	fs.BoolVar(&r.all, "all", false, "flows and exchanges too")
	fs.IntVar(&r.last, "last", 0, "only the last N matching records")
}

// query checks the flags and makes the filter's query (decisions in their one spelling, so that
// an appliance that predates the aliases matches them too); an error names the flag.
func (r *recordFlags) query(now time.Time) (url.Values, admin.ObserveFilter, error) {
	if r.output != "text" && r.output != "json" {
		return nil, admin.ObserveFilter{}, fmt.Errorf("-o %q: want text or json", r.output)
	}
	if r.last < 0 {
		return nil, admin.ObserveFilter{}, fmt.Errorf("--last %d: want a positive number of records", r.last)
	}
	q := url.Values{}
	for k, v := range map[string]string{"client": r.client, "tool": r.tool, "since": r.since, "until": r.until} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if r.decision != "" {
		d, err := telemetry.ParseDecisions(r.decision)
		if err != nil {
			return nil, admin.ObserveFilter{}, fmt.Errorf("--%v", err)
		}
		if len(d) > 0 {
			q.Set("decision", strings.Join(d, ","))
		}
	}
	if !r.all {
		q.Set("kind", "message,exchange")
	}
	f, err := admin.ParseObserveQuery(q, now)
	if err != nil {
		return nil, f, fmt.Errorf("--%v", err)
	}
	return q, f, nil
}

// recordOutput prints the records that passed: a line each (text or the JSON line as read), the
// last N of them only, or --top's table at the end.
type recordOutput struct {
	w    *bufio.Writer
	out  io.Writer
	json bool
	sum  *telemetry.CallCounts
	last int
	ring [][]byte // --last: the last lines (text or JSON), oldest at ringNext once full
	next int
	n    int // records passed
}

func newRecordOutput(stdout io.Writer, r *recordFlags) *recordOutput {
	o := &recordOutput{w: bufio.NewWriter(stdout), out: stdout, json: r.output == "json", last: r.last}
	if r.top {
		o.sum = telemetry.NewCallCounts()
	}
	return o
}

// add takes one record that passed the filter; line is it as read (the JSON line).
func (o *recordOutput) add(line []byte, rec *telemetry.FlowRecord) {
	o.n++
	var b []byte
	switch {
	case o.sum != nil && o.last == 0:
		o.sum.Add(rec)
		return
	case o.sum != nil || o.json:
		b = line // --top --last keeps the lines to count at the end
	default:
		b = []byte(textLine(rec))
	}
	if o.last > 0 {
		if len(o.ring) < o.last {
			o.ring = append(o.ring, append([]byte(nil), b...))
		} else {
			o.ring[o.next] = append(o.ring[o.next][:0], b...)
			o.next = (o.next + 1) % o.last
		}
		return
	}
	o.w.Write(b)
	o.w.WriteByte('\n')
}

// flush writes what is buffered (after each live record; a file is flushed at the end).
func (o *recordOutput) flush() { o.w.Flush() }

// finish prints what was held back: --last's lines, --top's table.
func (o *recordOutput) finish() {
	for i := range o.ring {
		b := o.ring[(o.next+i)%len(o.ring)]
		if o.sum != nil {
			var rec telemetry.FlowRecord
			if json.Unmarshal(b, &rec) == nil {
				o.sum.Add(&rec)
			}
			continue
		}
		o.w.Write(b)
		o.w.WriteByte('\n')
	}
	o.w.Flush()
	if o.sum != nil {
		printTop(o.out, o.sum)
	}
}

// cmdObserve follows a running appliance's decisions live (`mcpintercept observe`).
func cmdObserve(args []string, stdout, stderr io.Writer) int {
	fs, c := newToolsFlags("observe", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, observeUsageText) }
	var rf recordFlags
	rf.add(fs, false)
	var route string
	var noFollow bool
	var dur time.Duration
	fs.StringVar(&route, "route", "", "route name")
	fs.BoolVar(&noFollow, "no-follow", false, "print the recent records, then exit")
	fs.DurationVar(&dur, "for", 0, "follow for this long, then exit")
	if code, ok := parseNoArgs(fs, "observe", args, observeUsageText, stdout, stderr); !ok {
		return code
	}
	if dur < 0 {
		fmt.Fprintf(stderr, "mcpintercept observe: --for %v: want a positive duration\n", dur)
		return exitUsage
	}
	q, _, err := rf.query(time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept observe: %v\n", err)
		return exitUsage
	}
	if route != "" {
		q.Set("route", route)
	}
	if rf.last > 0 {
		noFollow = true
	}
	if noFollow {
		q.Set("follow", "0")
		if rf.since == "" {
			// every record the appliance keeps
			q.Set("since", time.Unix(0, 0).UTC().Format(time.RFC3339))
		}
	}
	if !c.resolve() {
		return exitUsage
	}
	if err := c.ObserveToken(); err != nil {
		fmt.Fprintf(stderr, "mcpintercept observe: %v\n", err)
		return exitRuntime
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	st, err := c.Observe(ctx, q)
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept observe: %v\n", err)
		var re *admin.RequestError
		if errors.As(err, &re) {
			return exitUsage
		}
		return exitRuntime
	}
	defer st.Close()

	out := newRecordOutput(stdout, &rf)
	code := exitOK
	ended := false // the appliance's end line was read
	for {
		it, ok := st.Next()
		if !ok {
			break
		}
		if it.End {
			ended = true
			if noFollow && it.Reason == "closed" {
				break // the snapshot asked for is complete
			}
			out.flush()
			fmt.Fprintf(stderr, "mcpintercept observe: the appliance ended the stream: %s\n", safe(it.Reason))
			code = exitRuntime
			break
		}
		if it.Err != nil {
			fmt.Fprintf(stderr, "mcpintercept observe: unreadable line from the appliance: %v\n", it.Err)
			continue
		}
		out.add(it.Line, &it.Record)
		out.flush()
	}
	if err := st.Err(); err != nil && ctx.Err() == nil && code == exitOK {
		fmt.Fprintf(stderr, "mcpintercept observe: the stream broke: %v\n", err)
		code = exitRuntime
	} else if err == nil && !ended && ctx.Err() == nil && code == exitOK {
		fmt.Fprintln(stderr, "mcpintercept observe: the appliance closed the stream")
		code = exitRuntime
	}
	out.finish()
	if ctx.Err() != nil && rf.top {
		code = exitOK // interrupted or --for: the summary is the answer
	}
	return code
}

// textLine is one record as observe prints it.
func textLine(r *telemetry.FlowRecord) string {
	client := r.Client
	if p := r.Process; p != nil {
		client += fmt.Sprintf(" %s[%d]", p.Comm, p.PID)
	}
	server := r.OrigDst
	if r.SNI != "" {
		server = r.SNI + "(" + r.OrigDst + ")"
	}
	method := r.MCPMethod
	switch {
	case method == "" && r.HTTPMethod != "":
		method = r.HTTPMethod + " " + r.Path
	case method == "":
		method = "(" + r.TLS + " flow)"
	}
	if r.Direction == telemetry.ServerToClient {
		method = "← " + method
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return safe(s)
	}
	return fmt.Sprintf("%s %s → %s %s %s %s %s %dms",
		r.Time.UTC().Format("15:04:05.000"), safe(client), safe(server), dash(method), dash(r.MCPName), dash(r.Decision), dash(r.Rule), r.DurationMS)
}

// printTop prints --top's table.
func printTop(out io.Writer, s *telemetry.CallCounts) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tTOOL\tCALLS\tDENIED\tP50_MS\tP99_MS")
	total, denied := 0, 0
	for _, r := range s.Rows() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\n", safe(r.Client), safe(r.Tool), r.Calls, r.Denied, r.P50MS, r.P99MS)
		total += r.Calls
		denied += r.Denied
	}
	tw.Flush()
	fmt.Fprintf(out, "%d tools/call requests, %d denied\n", total, denied)
}
