package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"mcpintercept/admin"
	"mcpintercept/telemetry"
)

const observeUsageText = `usage: mcpintercept observe [CONNECTION] [--client C] [--tool T] [--decision D] [--route R]
                           [--since DUR|RFC3339] [--all] [-o text|json] [--top [--for DUR]]

Follows a running appliance's decisions live, from its admin listener's GET /observe (which needs
the admin token). One line per MCP message: time, client (and process), server, method, tool,
decision, rule, latency. Stops on Ctrl-C; exits 1 when the appliance ends the stream (a reader
that falls behind is dropped: the reason is printed) or cannot be reached.

  --client C       an address, address:port, prefix (10.0.0.0/24) or process name
  --tool T         the tool (or prompt, resource) name
  --decision D     allow, deny, rate_limit, would_deny… (comma-separated)
  --route R        the route the connection takes
  --since S        replay the recent records (the appliance keeps the last 1024) from S on: a
                   duration back from now (10m) or an RFC 3339 time
  --all            flows and HTTP exchanges too, not only JSON-RPC messages
  -o text|json     text (default) or the records as JSON lines (the flow log's keys)
  --top            no live lines: count until Ctrl-C (or --for DUR), then print calls per client ×
                   tool, denials and p50/p99 latency of tools/call

CONNECTION (the appliance's admin listener):
  --config FILE      the appliance's configuration: the admin URL from admin.listen, the token from
                     tool_integrity.dir/admin.token
  --admin URL        the admin listener (default http://127.0.0.1:9464)
  --token-file FILE  the admin token (default /var/lib/mcpintercept/tools/admin.token)
`

// cmdObserve follows a running appliance's decisions live (`mcpintercept observe`).
func cmdObserve(args []string, stdout, stderr io.Writer) int {
	fs, c := newToolsFlags("observe", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, observeUsageText) }
	var client, tool, decision, route, since, output string
	var top, all bool
	var dur time.Duration
	fs.StringVar(&client, "client", "", "client address, prefix or process name")
	fs.StringVar(&tool, "tool", "", "tool name")
	fs.StringVar(&decision, "decision", "", "decisions (comma-separated)")
	fs.StringVar(&route, "route", "", "route name")
	fs.StringVar(&since, "since", "", "replay from a duration ago or an RFC 3339 time")
	fs.StringVar(&output, "o", "text", "text or json")
	fs.BoolVar(&top, "top", false, "summary: calls per client × tool, denials, latency")
	fs.BoolVar(&all, "all", false, "flows and exchanges too")
	fs.DurationVar(&dur, "for", 0, "with --top: stop after this long")
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprint(stdout, observeUsageText)
			return exitOK
		}
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "mcpintercept observe: unexpected argument %q\n", pos[0])
		return exitUsage
	}
	if output != "text" && output != "json" {
		fmt.Fprintf(stderr, "mcpintercept observe: -o %q: want text or json\n", output)
		return exitUsage
	}
	if dur != 0 && !top {
		fmt.Fprintln(stderr, "mcpintercept observe: --for goes with --top")
		return exitUsage
	}
	q := url.Values{}
	for k, v := range map[string]string{"client": client, "tool": tool, "decision": decision, "route": route, "since": since} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !all {
		q.Set("kind", "message,exchange")
	}
	if _, err := admin.ParseObserveQuery(q, time.Now()); err != nil {
		fmt.Fprintf(stderr, "mcpintercept observe: %v\n", err)
		return exitUsage
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

	var sum *telemetry.CallCounts
	if top {
		sum = telemetry.NewCallCounts()
	}
	w := bufio.NewWriter(stdout)
	code := exitOK
	for {
		it, ok := st.Next()
		if !ok {
			break
		}
		if it.End {
			w.Flush()
			fmt.Fprintf(stderr, "mcpintercept observe: the appliance ended the stream: %s\n", safe(it.Reason))
			code = exitRuntime
			break
		}
		if it.Err != nil {
			fmt.Fprintf(stderr, "mcpintercept observe: unreadable line from the appliance: %v\n", it.Err)
			continue
		}
		switch {
		case sum != nil:
			sum.Add(&it.Record)
		case output == "json":
			w.Write(it.Line)
			w.WriteByte('\n')
		default:
			w.WriteString(textLine(&it.Record))
			w.WriteByte('\n')
		}
		if sum == nil {
			w.Flush()
		}
	}
	w.Flush()
	if err := st.Err(); err != nil && ctx.Err() == nil && code == exitOK {
		fmt.Fprintf(stderr, "mcpintercept observe: the stream broke: %v\n", err)
		code = exitRuntime
	} else if err == nil && ctx.Err() == nil && code == exitOK {
		fmt.Fprintln(stderr, "mcpintercept observe: the appliance closed the stream")
		code = exitRuntime
	}
	if sum != nil {
		printTop(stdout, sum)
		if ctx.Err() != nil {
			code = exitOK // interrupted or --for: the summary is the answer
		}
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
