package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"mcpintercept/admin"
	"mcpintercept/config"
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
	tok, err := os.ReadFile(c.tokenFile)
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept observe: cannot read the admin token: %v (the appliance makes <tool_integrity.dir>/%s when it starts with admin.listen on; pass --config or --token-file)\n", err, config.AdminTokenFile)
		return exitRuntime
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dur)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.admin+"/observe?"+q.Encode(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept observe: %v\n", err)
		return exitUsage
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := (&http.Client{}).Do(req) // no timeout: the stream lasts
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept observe: cannot reach the appliance's admin listener at %s: %v (is `mcpintercept run` running? admin.listen)\n", c.admin, unwrapURLError(err))
		return exitRuntime
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := strings.TrimSpace(string(b))
		if i := strings.IndexByte(msg, '\n'); i >= 0 {
			msg = msg[:i]
		}
		hint := ""
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			hint = fmt.Sprintf(" (the token in %s is not the appliance's: pass --config or --token-file)", c.tokenFile)
		case http.StatusNotFound:
			hint = " (an appliance that predates observe)"
		}
		fmt.Fprintf(stderr, "mcpintercept observe: the admin listener at %s answered %s: %s%s\n", c.admin, resp.Status, safe(msg), hint)
		return exitRuntime
	}

	var sum *telemetry.CallCounts
	if top {
		sum = telemetry.NewCallCounts()
	}
	w := bufio.NewWriter(stdout)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	code := exitOK
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue // keepalive
		}
		var end struct {
			Observe string `json:"observe"`
			Reason  string `json:"reason"`
		}
		if json.Unmarshal(line, &end) == nil && end.Observe == "end" {
			w.Flush()
			fmt.Fprintf(stderr, "mcpintercept observe: the appliance ended the stream: %s\n", safe(end.Reason))
			code = exitRuntime
			break
		}
		var r telemetry.FlowRecord
		if err := json.Unmarshal(line, &r); err != nil {
			fmt.Fprintf(stderr, "mcpintercept observe: unreadable line from the appliance: %v\n", err)
			continue
		}
		switch {
		case sum != nil:
			sum.Add(&r)
		case output == "json":
			w.Write(line)
			w.WriteByte('\n')
		default:
			w.WriteString(textLine(&r))
			w.WriteByte('\n')
		}
		if sum == nil {
			w.Flush()
		}
	}
	w.Flush()
	if err := sc.Err(); err != nil && ctx.Err() == nil && code == exitOK {
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
