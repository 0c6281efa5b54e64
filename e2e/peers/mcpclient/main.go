//go:build linux

// Command mcpclient is the MCP client peer of the end-to-end tests: a real
// Go SDK client on Streamable HTTP.
//
// The default run connects, lists tools, resources and prompts, calls echo
// and add (repeated -calls times), closes the session and prints one
// canonical JSON document on stdout. That document holds nothing that
// varies between runs (no session ids, times or addresses), so a test can
// compare a direct run with a run through the appliance byte for byte.
//
// The run adapts to the server's tool list so the same command works against
// the e2e mcpserver and @modelcontextprotocol/server-everything: echo takes
// "text" or "message" (read from its input schema), and the sum tool is
// "add" or "get-sum", called only when present.
//
// With -tool it calls only that tool with the -args JSON object and prints
// one JSON line: the result (or the JSON-RPC error with its data, or the
// transport error) and how many progress notifications arrived. Any error,
// including an isError result, exits 1 after printing.
//
//	mcpclient -url http://10.200.2.2:8080/mcp [-calls 1] [-timeout 20s] [-ca ca.pem]
//	mcpclient -url URL -tool progress -args '{"steps":5}'
//	mcpclient -url URL -tool ask_model -answer [-name lab-agent-untrusted]
//
// -answer declares the sampling and elicitation capabilities and answers
// those requests (server→client on 2025-x, input requests of an
// input_required result on 2026-07-28, which the SDK retries on its own)
// with fixed results: a sampling request gets "a canned completion from the
// lab client" (model lab-model), an elicitation gets accept with
// {"name":"lab user"}; the -tool output then counts them under "served".
// -name sets clientInfo.name (policy reads it as mcp.client_info.name).
//
// -list (with -tool) lists the tools first, in the same session, and adds
// their names to the output as "tools": a Level 2 route learns the input
// schemas it validates arguments against from that list. -sse connects with
// the 2024-11-05 HTTP+SSE transport (mcp.SSEClientTransport: -url is the
// GET endpoint) instead of Streamable HTTP.
//
// -traceparent TP (with -tracestate TS) puts W3C trace context in params._meta of every
// tools/call the client makes (SEP-414: _meta.traceparent, _meta.tracestate), as an agent that
// traces its own calls does; the value is sent as given, unchecked, so a test can also send a
// malformed one.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const echoMessage = "hello through the network"

// headerFlag collects repeatable "Name: value" request headers.
type headerFlag []string

func (h *headerFlag) String() string     { return strings.Join(*h, "; ") }
func (h *headerFlag) Set(v string) error { *h = append(*h, v); return nil }

type options struct {
	url             string
	calls           int
	timeout         time.Duration
	ca              string
	tool            string
	args            string
	protocolVersion string
	headers         headerFlag
	name            string
	answer          bool
	list            bool
	sse             bool
	bearer          string
	traceparent     string
	tracestate      string
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "MCP endpoint URL (required), e.g. http://10.200.2.2:8080/mcp")
	flag.IntVar(&o.calls, "calls", 1, "how many times the default run repeats the echo and add calls")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Second, "deadline for the whole run")
	flag.StringVar(&o.ca, "ca", "", "PEM file with extra root CA certificates for HTTPS")
	flag.StringVar(&o.tool, "tool", "", "call only this tool and print its result")
	flag.StringVar(&o.args, "args", "{}", "JSON object of arguments for -tool")
	flag.StringVar(&o.protocolVersion, "protocol-version", "", "protocol version to ask for (default: the SDK's latest, which tries server/discover and falls back to initialize)")
	flag.Var(&o.headers, "header", `extra HTTP request header "Name: value", repeatable`)
	flag.StringVar(&dialNetwork, "dial-network", "tcp", `network for every dial: "tcp6" keeps an IPv4-mapped address (::ffff:a.b.c.d) on an IPv6 socket`)
	flag.StringVar(&o.name, "name", "mcpintercept-e2e-client", "clientInfo.name")
	flag.BoolVar(&o.answer, "answer", false, "declare sampling and elicitation and answer them with fixed results (counted in the -tool output)")
	flag.BoolVar(&o.list, "list", false, "with -tool: list the tools first in the same session and report their names")
	flag.BoolVar(&o.sse, "sse", false, "use the 2024-11-05 HTTP+SSE transport (-url is the SSE endpoint)")
	flag.StringVar(&o.bearer, "bearer", "", "send Authorization: Bearer TOKEN on every request")
	flag.StringVar(&o.traceparent, "traceparent", "", "W3C traceparent put in params._meta.traceparent of every tools/call")
	flag.StringVar(&o.tracestate, "tracestate", "", "W3C tracestate put in params._meta.tracestate of every tools/call (with -traceparent)")
	flag.Parse()

	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "mcpclient: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.url == "" {
		return errors.New("-url is required")
	}
	if o.calls < 1 {
		return errors.New("-calls must be at least 1")
	}
	if o.tracestate != "" && o.traceparent == "" {
		return errors.New("-tracestate needs -traceparent")
	}
	traceMeta = mcp.Meta{}
	if o.traceparent != "" {
		traceMeta["traceparent"] = o.traceparent
	}
	if o.tracestate != "" {
		traceMeta["tracestate"] = o.tracestate
	}
	httpClient, err := newHTTPClient(o.ca, o.headers, o.bearer)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	var progress progressCounter
	copts := &mcp.ClientOptions{
		// No roots, sampling or elicitation: a server (server-everything)
		// must not register capability-dependent tools or call back, so
		// the tool list and traffic stay the same from run to run.
		Capabilities:                &mcp.ClientCapabilities{},
		ProgressNotificationHandler: progress.handle,
	}
	if o.answer {
		served = &servedCounts{}
		copts.CreateMessageHandler = served.sample
		copts.ElicitationHandler = served.elicit
	}
	client := mcp.NewClient(&mcp.Implementation{Name: o.name, Version: "1.0.0"}, copts)
	var transport mcp.Transport = &mcp.StreamableClientTransport{Endpoint: o.url, HTTPClient: httpClient}
	if o.sse {
		transport = &mcp.SSEClientTransport{Endpoint: o.url, HTTPClient: httpClient}
	}
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: o.protocolVersion})
	if err != nil {
		return fmt.Errorf("connect %s: %w", o.url, err)
	}
	defer cs.Close()

	if o.tool != "" {
		err = callOne(ctx, cs, o.tool, o.args, o.list, &progress)
	} else {
		err = defaultRun(ctx, cs, o.calls)
	}
	if err != nil {
		return err
	}
	if err := cs.Close(); err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	return nil
}

// traceMeta is the W3C trace context of -traceparent/-tracestate (empty without them).
var traceMeta mcp.Meta

// callMeta is a fresh params._meta for one tools/call: the trace context, or nil when there is
// none (the SDK then adds only its own keys, as before).
func callMeta() mcp.Meta {
	if len(traceMeta) == 0 {
		return nil
	}
	return maps.Clone(traceMeta)
}

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers http.Header
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, vs := range t.headers {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	return t.base.RoundTrip(r)
}

// dialMapped connects an IPv6 socket (V6ONLY off) to an IPv4-mapped address, as a C program
// would; Go's own dialer turns such an address into an IPv4 socket or refuses it for "tcp6".
func dialMapped(ap netip.AddrPort) (net.Conn, error) {
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.Connect(fd, &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("connect %s: %w", ap, err)
	}
	f := os.NewFile(uintptr(fd), "mapped")
	defer f.Close()
	return net.FileConn(f)
}

// dialNetwork is -dial-network.
var dialNetwork = "tcp"

func newHTTPClient(caFile string, headers []string, bearer string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The tests route by address; an environment proxy would bypass the
	// path under test.
	tr.Proxy = nil
	if dialNetwork != "tcp" {
		d := &net.Dialer{Timeout: 10 * time.Second}
		tr.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			if dialNetwork == "tcp6" {
				if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().Is4In6() {
					return dialMapped(ap)
				}
			}
			return d.DialContext(ctx, dialNetwork, addr)
		}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read -ca: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate found in %s", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var rt http.RoundTripper = tr
	if len(headers) > 0 {
		h := http.Header{}
		for _, kv := range headers {
			k, v, ok := strings.Cut(kv, ":")
			if !ok || strings.TrimSpace(k) == "" {
				return nil, fmt.Errorf("-header %q: want \"Name: value\"", kv)
			}
			h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		rt = &headerTransport{base: tr, headers: h}
	}
	if bearer != "" {
		rt = &headerTransport{base: rt, headers: http.Header{"Authorization": {"Bearer " + bearer}}}
	}
	return &http.Client{Transport: rt}, nil
}

// report is the canonical output of the default run. Field order is fixed
// and maps marshal with sorted keys, so equal runs print equal bytes.
type report struct {
	Server          *mcp.Implementation `json:"server"`
	ProtocolVersion string              `json:"protocol_version"`
	Tools           []string            `json:"tools"`
	Resources       []string            `json:"resources"`
	Prompts         []string            `json:"prompts"`
	Calls           []callReport        `json:"calls"`
}

type callReport struct {
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
	IsError   bool           `json:"is_error"`
	Text      string         `json:"text"`
}

func defaultRun(ctx context.Context, cs *mcp.ClientSession, calls int) error {
	ir := cs.InitializeResult()
	if ir == nil {
		return errors.New("no initialize result")
	}
	rep := report{
		ProtocolVersion: ir.ProtocolVersion,
		Tools:           []string{},
		Resources:       []string{},
		Prompts:         []string{},
	}
	if ir.ServerInfo != nil {
		rep.Server = &mcp.Implementation{Name: ir.ServerInfo.Name, Version: ir.ServerInfo.Version}
	}
	caps := ir.Capabilities
	if caps == nil {
		caps = &mcp.ServerCapabilities{}
	}

	tools := map[string]*mcp.Tool{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		tools[t.Name] = t
		rep.Tools = append(rep.Tools, t.Name)
	}
	slices.Sort(rep.Tools)

	if caps.Resources != nil {
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				return fmt.Errorf("list resources: %w", err)
			}
			rep.Resources = append(rep.Resources, r.URI)
		}
		slices.Sort(rep.Resources)
	}
	if caps.Prompts != nil {
		for p, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				return fmt.Errorf("list prompts: %w", err)
			}
			rep.Prompts = append(rep.Prompts, p.Name)
		}
		slices.Sort(rep.Prompts)
	}

	echo, ok := tools["echo"]
	if !ok {
		return fmt.Errorf("server has no echo tool (tools: %s)", strings.Join(rep.Tools, ", "))
	}
	echoArg, err := pickProperty(echo, "text", "message")
	if err != nil {
		return err
	}
	planned := []callReport{{Tool: "echo", Arguments: map[string]any{echoArg: echoMessage}}}
	for _, name := range []string{"add", "get-sum"} {
		t, ok := tools[name]
		if !ok {
			continue
		}
		if _, errA := pickProperty(t, "a"); errA != nil {
			return errA
		}
		if _, errB := pickProperty(t, "b"); errB != nil {
			return errB
		}
		planned = append(planned, callReport{Tool: name, Arguments: map[string]any{"a": 2, "b": 3}})
		break
	}

	for range calls {
		for _, c := range planned {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Meta: callMeta(), Name: c.Tool, Arguments: c.Arguments})
			if err != nil {
				return fmt.Errorf("call %s: %w", c.Tool, err)
			}
			if res.IsError {
				return fmt.Errorf("call %s: tool returned an error: %s", c.Tool, resultText(res))
			}
			c.Text = resultText(res)
			rep.Calls = append(rep.Calls, c)
		}
	}

	out, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	_, err = fmt.Printf("%s\n", out)
	return err
}

// pickProperty returns the first of names that the tool's input schema
// declares as a property.
func pickProperty(t *mcp.Tool, names ...string) (string, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return "", fmt.Errorf("tool %s: encode input schema: %w", t.Name, err)
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		return "", fmt.Errorf("tool %s: decode input schema: %w", t.Name, err)
	}
	for _, n := range names {
		if _, ok := schema.Properties[n]; ok {
			return n, nil
		}
	}
	return "", fmt.Errorf("tool %s: input schema has none of the properties %v", t.Name, names)
}

func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// progressCounter counts progress notifications. The SDK hands
// notifications to a handler queue while the response wakes the caller
// directly, so the count can lag the call's return by a moment.
type progressCounter struct {
	mu sync.Mutex
	n  int
}

func (p *progressCounter) handle(context.Context, *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
}

func (p *progressCounter) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// settle waits until the count has not changed for quiet, at most max.
func (p *progressCounter) settle(quiet, max time.Duration) int {
	deadline := time.Now().Add(max)
	last := p.count()
	for time.Now().Before(deadline) {
		time.Sleep(quiet)
		n := p.count()
		if n == last {
			return n
		}
		last = n
	}
	return last
}

// listNames lists every tool (all pages), sorted; a failure is reported, not fatal, so that the
// call still runs and both outcomes are printed.
func listNames(ctx context.Context, cs *mcp.ClientSession) ([]string, string) {
	names := []string{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return names, err.Error()
		}
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names, ""
}

type oneReport struct {
	Tools                 []string            `json:"tools,omitempty"`
	ListError             string              `json:"list_error,omitempty"`
	Tool                  string              `json:"tool"`
	IsError               bool                `json:"is_error"`
	Text                  string              `json:"text"`
	Result                *mcp.CallToolResult `json:"result,omitempty"`
	Error                 *jsonrpc.Error      `json:"error,omitempty"`
	TransportError        string              `json:"transport_error,omitempty"`
	ProgressNotifications int                 `json:"progress_notifications"`
	Served                *servedCounts       `json:"served,omitempty"`
}

// served counts the requests -answer answered (nil without -answer).
var served *servedCounts

type servedCounts struct {
	mu          sync.Mutex
	Sampling    int `json:"sampling"`
	Elicitation int `json:"elicitation"`
}

func (s *servedCounts) sample(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	s.mu.Lock()
	s.Sampling++
	s.mu.Unlock()
	return &mcp.CreateMessageResult{Role: "assistant", Model: "lab-model", StopReason: "endTurn",
		Content: &mcp.TextContent{Text: "a canned completion from the lab client"}}, nil
}

func (s *servedCounts) elicit(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	s.mu.Lock()
	s.Elicitation++
	s.mu.Unlock()
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "lab user"}}, nil
}

func callOne(ctx context.Context, cs *mcp.ClientSession, tool, argsJSON string, list bool, progress *progressCounter) error {
	var args map[string]any
	if err := json.Unmarshal([]byte(argsJSON), &args); err != nil {
		return fmt.Errorf("-args must be a JSON object: %w", err)
	}
	var tools []string
	var listErr string
	if list {
		tools, listErr = listNames(ctx, cs)
	}
	params := &mcp.CallToolParams{Meta: callMeta(), Name: tool, Arguments: args}
	params.SetProgressToken("mcpclient-progress")
	res, callErr := cs.CallTool(ctx, params)

	rep := oneReport{Tool: tool, Tools: tools, ListError: listErr}
	var wireErr *jsonrpc.Error
	switch {
	case callErr == nil:
		rep.Result = res
		rep.IsError = res.IsError
		rep.Text = resultText(res)
	case errors.As(callErr, &wireErr):
		rep.Error = wireErr
	default:
		// Not a JSON-RPC answer (a refused connection, or an HTTP status
		// with no JSON-RPC body, such as a Level 1 403): still printed, so
		// a test can read it from stdout like any other outcome.
		rep.TransportError = callErr.Error()
	}
	rep.ProgressNotifications = progress.settle(100*time.Millisecond, time.Second)
	if served != nil {
		served.mu.Lock()
		defer served.mu.Unlock()
		rep.Served = served
	}

	out, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if _, err := fmt.Printf("%s\n", out); err != nil {
		return err
	}
	switch {
	case rep.TransportError != "":
		return fmt.Errorf("call %s: %s", tool, rep.TransportError)
	case rep.Error != nil:
		return fmt.Errorf("call %s: JSON-RPC error %d: %s", tool, rep.Error.Code, rep.Error.Message)
	case rep.IsError:
		return fmt.Errorf("call %s: tool returned an error: %s", tool, rep.Text)
	}
	return nil
}
