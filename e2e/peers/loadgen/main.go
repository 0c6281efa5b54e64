// Command loadgen is the HTTP load generator of the benchmark: it measures
// what the appliance costs an MCP server's request rate and latency.
//
// Each of -conns workers holds one keep-alive HTTP/1.1 connection (a raw
// client: one write per request, Content-Length and chunked responses parsed)
// and sends MCP tools/call POSTs for the echo tool with a JSON body of about
// -body-size bytes, with the request headers of the MCP version given by
// -mcp-version (2026-07-28 by default: MCP-Protocol-Version, Mcp-Method and
// Mcp-Name). The target is the e2e mcpserver with -stateless, which answers a
// tools/call without an initialize, or the fastorigin peer, which answers
// every request with a fixed result. Every response must be HTTP 200 carrying
// a JSON-RPC result;
// anything else counts as an error, and any error makes the exit code 1
// after the report.
//
// Requests that start during -warmup are not measured; then it runs for
// -duration and prints one JSON line:
//
//	{"label":..,"requests":N,"errors":E,"rps":F,"p50_us":F,"p99_us":F,"mean_us":F,...,"total":T}
//
// "errors" counts failures over the whole run, warm-up included; "total" counts every request
// of the run, warm-up and failures included (what the proxy's CPU and allocations are divided by).
//
// By default each worker sends its next request as soon as the previous
// response is read (closed loop: the report's rps is the throughput). With
// -rate R the run is open loop instead: request i is due at start + i/R, the
// workers take the due requests in order (a worker sleeps until the next one is
// due), and a request's latency is measured from when it was due, not from
// when it was sent, whenever it is sent late (all workers busy), so a slow
// path cannot hide its queueing (no coordinated omission); a request sent on
// time is measured from its send, so the timer's wake-up delay is not counted.
// "late" in the report counts requests sent more than 1 ms after they were due.
//
// The fault soak (scripts/soak.sh) adds three flags. With -nonce PREFIX every
// tools/call carries its own nonce as echo's text (PREFIX-<worker>-<n>, never
// reused; -body-size is then ignored; from 2026-07-28 on with the params._meta
// a stateless MCP server requires) and a result counts as a success only
// when it carries that nonce: a result without it is counted as "fabricated"
// (an error too). -error-log FILE gets one JSON line per failed request:
//
//	{"start_ms":..,"end_ms":..,"nonce":"..","kind":"error"|"fabricated","err":".."}
//
// (Unix milliseconds). -progress D prints {"progress":{"ok":N,"errors":E,
// "fabricated":F}} to stderr every D.
//
//	loadgen -url http://10.200.2.2:8080/mcp [-conns 16] [-duration 10s] [-body-size 1024] [-warmup 1s] [-label NAME]
//	        [-rate 1000] [-mcp-version 2026-07-28] [-nonce PREFIX] [-error-log FILE] [-progress 5s]
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type options struct {
	url      string
	conns    int
	duration time.Duration
	bodySize int
	warmup   time.Duration
	label    string
	ca       string
	timeout  time.Duration
	rate     float64
	version  string
	nonce    string
	errorLog string
	progress time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "MCP endpoint URL (required), http:// or https://")
	flag.IntVar(&o.conns, "conns", 16, "concurrent keep-alive connections, one worker each")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "measured run time after warm-up")
	flag.IntVar(&o.bodySize, "body-size", 1024, "approximate JSON request body size in bytes")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up time")
	flag.StringVar(&o.label, "label", "", "label copied into the report")
	flag.StringVar(&o.ca, "ca", "", "PEM file with extra root CAs for https:// targets")
	flag.DurationVar(&o.timeout, "request-timeout", 10*time.Second, "deadline for one request and its response")
	flag.Float64Var(&o.rate, "rate", 0, "open loop: requests per second in total (0: closed loop, as fast as answered)")
	flag.StringVar(&o.version, "mcp-version", "2026-07-28", "MCP-Protocol-Version request header")
	flag.StringVar(&toolName, "tool", "echo", "name of the echo tool to call (an aggregate name such as go.echo through a federation)")
	flag.StringVar(&o.nonce, "nonce", "", "give every call its own nonce PREFIX-<worker>-<n> as echo's text, and count a result without it as fabricated")
	flag.StringVar(&o.errorLog, "error-log", "", "append one JSON line per failed request to this file")
	flag.DurationVar(&o.progress, "progress", 0, "print the counts so far to stderr this often (0: never)")
	flag.Parse()

	code, err := run(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: %v\n", err)
	}
	os.Exit(code)
}

type report struct {
	Label    string  `json:"label"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	RPS      float64 `json:"rps"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	MeanUs   float64 `json:"mean_us"`
	Conns    int     `json:"conns"`
	BodySize int     `json:"body_size"`
	Rate     float64 `json:"rate,omitempty"`
	Late     int     `json:"late,omitempty"`
	// Fabricated counts results without the call's nonce (-nonce), errors too.
	Fabricated int `json:"fabricated,omitempty"`
	// Total counts every request of the run, warm-up and failures included: what the proxy
	// handled while its CPU and allocations were counted.
	Total int `json:"total"`
}

func run(o options) (int, error) {
	t, err := newTarget(o)
	if err != nil {
		return 2, err
	}

	start := time.Now()
	measureFrom := start.Add(o.warmup)
	end := measureFrom.Add(o.duration)

	if o.errorLog != "" {
		f, err := os.OpenFile(o.errorLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return 2, err
		}
		defer f.Close()
		t.errLog = f
	}
	if o.progress > 0 {
		done := make(chan struct{})
		defer close(done)
		go t.counts.report(o.progress, done)
	}

	workers := make([]*worker, o.conns)
	var wg sync.WaitGroup
	var sched *schedule
	if o.rate > 0 {
		sched = &schedule{start: start, interval: time.Duration(float64(time.Second) / o.rate)}
	}
	for i := range workers {
		w := &worker{t: t, id: i, lat: make([]time.Duration, 0, 1<<14)}
		workers[i] = w
		if sched != nil {
			wg.Go(func() { w.openLoop(sched, measureFrom, end) })
		} else {
			wg.Go(func() { w.loop(measureFrom, end) })
		}
	}
	wg.Wait()
	elapsed := time.Since(measureFrom)

	var all []time.Duration
	errs, late, fabricated, total := 0, 0, 0, 0
	var firstErrs []string
	for _, w := range workers {
		all = append(all, w.lat...)
		total += w.ok + w.errs
		errs += w.errs
		late += w.late
		fabricated += w.fabricated
		for _, e := range w.errSamples {
			if len(firstErrs) < 5 {
				firstErrs = append(firstErrs, e)
			}
		}
	}
	slices.Sort(all)

	rep := report{Label: o.label, Requests: len(all), Errors: errs, Conns: o.conns, BodySize: len(t.body), Rate: o.rate, Late: late,
		Fabricated: fabricated, Total: total}
	if elapsed > 0 {
		rep.RPS = round2(float64(len(all)) / elapsed.Seconds())
	}
	if n := len(all); n > 0 {
		var sum time.Duration
		for _, d := range all {
			sum += d
		}
		rep.P50us = us(all[(n-1)*50/100])
		rep.P99us = us(all[(n-1)*99/100])
		rep.MeanUs = round2(float64(sum) / float64(n) / 1e3)
	}
	out, err := json.Marshal(rep)
	if err != nil {
		return 2, err
	}
	fmt.Printf("%s\n", out)

	for _, e := range firstErrs {
		fmt.Fprintf(os.Stderr, "loadgen: error: %s\n", e)
	}
	if errs > 0 {
		return 1, fmt.Errorf("%d requests failed", errs)
	}
	if len(all) == 0 {
		return 1, errors.New("no request completed in the measured window")
	}
	return 0, nil
}

func us(d time.Duration) float64 { return round2(float64(d) / 1e3) }

func round2(f float64) float64 {
	return float64(int64(f*100+0.5)) / 100
}

// target is what every worker needs: where to dial and the request bytes,
// built once (with -nonce, the head and body around each call's nonce).
type target struct {
	addr    string
	tlsConf *tls.Config
	request []byte
	body    []byte
	timeout time.Duration
	// -nonce: the request is head + Content-Length + body, the body's text the nonce.
	nonce  string
	head   string
	meta   string // ,"_meta":{...}: what a 2026-07-28 request carries in its body
	errLog *os.File
	logMu  sync.Mutex
	counts counts
}

// counts are the running totals -progress prints.
type counts struct{ ok, errors, fabricated atomic.Int64 }

func (c *counts) report(every time.Duration, done <-chan struct{}) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			fmt.Fprintf(os.Stderr, "{\"progress\":{\"ok\":%d,\"errors\":%d,\"fabricated\":%d}}\n",
				c.ok.Load(), c.errors.Load(), c.fabricated.Load())
		}
	}
}

// nonceRequest is the whole request of a call whose echo text is nonce.
func (t *target) nonceRequest(nonce string) []byte {
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":` + strconv.Quote(toolName) + `,"arguments":{"text":"` + nonce + `"}` + t.meta + `}}`
	return []byte(t.head + "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// logError writes one failed request to -error-log.
func (t *target) logError(start, end time.Time, nonce string, err error) {
	if t.errLog == nil {
		return
	}
	kind := "error"
	if errors.Is(err, errFabricated) {
		kind = "fabricated"
	}
	line, _ := json.Marshal(struct {
		Start int64  `json:"start_ms"`
		End   int64  `json:"end_ms"`
		Nonce string `json:"nonce,omitempty"`
		Kind  string `json:"kind"`
		Err   string `json:"err"`
	}{start.UnixMilli(), end.UnixMilli(), nonce, kind, err.Error()})
	t.logMu.Lock()
	defer t.logMu.Unlock()
	t.errLog.Write(append(line, '\n'))
}

// errFabricated: a result that does not carry the call's nonce.
var errFabricated = errors.New("result without the call's nonce (fabricated)")

func newTarget(o options) (*target, error) {
	if o.url == "" {
		return nil, errors.New("-url is required")
	}
	if o.conns < 1 {
		return nil, errors.New("-conns must be at least 1")
	}
	if o.duration <= 0 || o.warmup < 0 {
		return nil, errors.New("-duration must be positive and -warmup not negative")
	}
	u, err := url.Parse(o.url)
	if err != nil {
		return nil, fmt.Errorf("parse -url: %w", err)
	}
	t := &target{timeout: o.timeout, nonce: o.nonce}
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		if port == "" {
			port = "443"
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if o.ca != "" {
			pem, err := os.ReadFile(o.ca)
			if err != nil {
				return nil, fmt.Errorf("read -ca: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("no certificate found in %s", o.ca)
			}
		}
		t.tlsConf = &tls.Config{ServerName: u.Hostname(), RootCAs: pool, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	default:
		return nil, fmt.Errorf("-url scheme %q: want http or https", u.Scheme)
	}
	t.addr = net.JoinHostPort(u.Hostname(), port)
	path := u.RequestURI()

	t.body = echoBody(o.bodySize)
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\n", path)
	fmt.Fprintf(&b, "Host: %s\r\n", u.Host)
	b.WriteString("Content-Type: application/json\r\n")
	b.WriteString("Accept: application/json, text/event-stream\r\n")
	fmt.Fprintf(&b, "MCP-Protocol-Version: %s\r\n", o.version)
	b.WriteString("Mcp-Method: tools/call\r\n")
	fmt.Fprintf(&b, "Mcp-Name: %s\r\n", toolName)
	t.head = b.String()
	// From 2026-07-28 on, a request without initialize carries the version, the client's
	// capabilities and info in params._meta, the version equal to the header's.
	if o.version >= "2026-07-28" {
		v, _ := json.Marshal(o.version)
		t.meta = `,"_meta":{"io.modelcontextprotocol/protocolVersion":` + string(v) +
			`,"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"loadgen","version":"1"}}`
	}
	if t.nonce != "" {
		t.body = nil
		t.request = nil
		return t, nil
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(t.body))
	b.Write(t.body)
	t.request = b.Bytes()
	return t, nil
}

// echoBody builds a tools/call for echo whose JSON is size bytes, or the
// smallest valid one when size is below the envelope's length.
// toolName is -tool: the tool every call names.
var toolName = "echo"

func echoBody(size int) []byte {
	head := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":` + strconv.Quote(toolName) + `,"arguments":{"text":"`
	const tail = `"}}}`
	pad := max(size-len(head)-len(tail), 1)
	return []byte(head + strings.Repeat("x", pad) + tail)
}

type worker struct {
	t          *target
	id         int
	seq        int
	nonce      string // the current call's, with -nonce
	fabricated int
	conn       net.Conn
	br         *bufio.Reader
	body       []byte
	lat        []time.Duration
	ok         int // requests answered over the whole run, warm-up included
	errs       int
	late       int
	errSamples []string
}

// schedule hands out the due times of an open-loop run in order.
type schedule struct {
	start    time.Time
	interval time.Duration
	next     atomic.Int64
}

func (s *schedule) take() time.Time {
	return s.start.Add(time.Duration(s.next.Add(1)-1) * s.interval)
}

// openLoop sends the requests the schedule makes due.
func (w *worker) openLoop(s *schedule, measureFrom, end time.Time) {
	defer w.closeConn()
	for {
		due := s.take()
		if !due.Before(end) {
			return
		}
		// On schedule, latency counts from the send (the sleep's own overshoot is the
		// load generator's, not the path's); behind schedule, from the due time.
		from := due
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
			from = time.Now()
		} else if d < -time.Millisecond && !due.Before(measureFrom) {
			w.late++
		}
		if t0 := time.Now(); w.failed(t0, w.roundTrip(t0)) {
			continue
		}
		w.ok++
		if !due.Before(measureFrom) {
			w.lat = append(w.lat, time.Since(from))
		}
	}
}

func (w *worker) loop(measureFrom, end time.Time) {
	defer w.closeConn()
	for {
		t0 := time.Now()
		if !t0.Before(end) {
			return
		}
		if w.failed(t0, w.roundTrip(t0)) {
			// Do not spin against a server that refuses connections.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		w.ok++
		if !t0.Before(measureFrom) {
			w.lat = append(w.lat, time.Since(t0))
		}
	}
}

// failed counts a request that started at t0 and ended with err, when err is not nil, and
// reports whether it did.
func (w *worker) failed(t0 time.Time, err error) bool {
	if err == nil {
		w.t.counts.ok.Add(1)
		return false
	}
	w.errs++
	w.t.counts.errors.Add(1)
	if errors.Is(err, errFabricated) {
		w.fabricated++
		w.t.counts.fabricated.Add(1)
	}
	if len(w.errSamples) < 5 {
		w.errSamples = append(w.errSamples, err.Error())
	}
	w.t.logError(t0, time.Now(), w.nonce, err)
	w.closeConn()
	return true
}

func (w *worker) closeConn() {
	if w.conn != nil {
		w.conn.Close()
		w.conn = nil
	}
}

func (w *worker) dial() error {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", w.t.addr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", w.t.addr, err)
	}
	if w.t.tlsConf != nil {
		tc := tls.Client(c, w.t.tlsConf)
		tc.SetDeadline(time.Now().Add(w.t.timeout))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return fmt.Errorf("tls handshake %s: %w", w.t.addr, err)
		}
		c = tc
	}
	w.conn = c
	if w.br == nil {
		w.br = bufio.NewReaderSize(c, 64<<10)
	} else {
		w.br.Reset(c)
	}
	return nil
}

// roundTrip sends one request and reads the whole response on the
// worker's connection, dialling first when there is none.
func (w *worker) roundTrip(t0 time.Time) error {
	if w.t.nonce != "" {
		w.seq++
		w.nonce = w.t.nonce + "-" + strconv.Itoa(w.id) + "-" + strconv.Itoa(w.seq)
	}
	if w.conn == nil {
		if err := w.dial(); err != nil {
			return err
		}
	}
	if err := w.conn.SetDeadline(t0.Add(w.t.timeout)); err != nil {
		return err
	}
	req := w.t.request
	if w.t.nonce != "" {
		req = w.t.nonceRequest(w.nonce)
	}
	if _, err := w.conn.Write(req); err != nil {
		return fmt.Errorf("write request: %w", err)
	}
	status, closeAfter, err := w.readResponse()
	if err != nil {
		return err
	}
	if closeAfter {
		w.closeConn()
	}
	if status != 200 {
		return fmt.Errorf("HTTP status %d: %.200q", status, w.body)
	}
	// The padding is all "x", so these keys can only come from the
	// JSON-RPC envelope.
	if !bytes.Contains(w.body, []byte(`"result":`)) || bytes.Contains(w.body, []byte(`"error":`)) {
		return fmt.Errorf("response is not a JSON-RPC result: %.200q", w.body)
	}
	// The nonce is unique and quoted: only a result about this very call carries it.
	if w.t.nonce != "" && !bytes.Contains(w.body, []byte(`"`+w.nonce+`"`)) {
		return fmt.Errorf("%w: %.200q", errFabricated, w.body)
	}
	return nil
}

// readResponse reads one HTTP/1.1 response into w.body. It reports whether
// the connection must be closed afterwards.
func (w *worker) readResponse() (status int, closeAfter bool, err error) {
	line, err := w.readLine()
	if err != nil {
		return 0, false, fmt.Errorf("read status line: %w", err)
	}
	proto, rest, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(rest, " ")
	if !strings.HasPrefix(proto, "HTTP/1.") {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	status, err = strconv.Atoi(code)
	if err != nil {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	closeAfter = proto == "HTTP/1.0"

	contentLength := int64(-1)
	chunked := false
	for {
		h, err := w.readLine()
		if err != nil {
			return 0, false, fmt.Errorf("read header: %w", err)
		}
		if h == "" {
			break
		}
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return 0, false, fmt.Errorf("bad header line %q", h)
		}
		v = strings.TrimSpace(v)
		switch {
		case strings.EqualFold(k, "Content-Length"):
			contentLength, err = strconv.ParseInt(v, 10, 64)
			if err != nil || contentLength < 0 {
				return 0, false, fmt.Errorf("bad Content-Length %q", v)
			}
		case strings.EqualFold(k, "Transfer-Encoding"):
			chunked = strings.Contains(strings.ToLower(v), "chunked")
		case strings.EqualFold(k, "Connection"):
			if strings.Contains(strings.ToLower(v), "close") {
				closeAfter = true
			}
		}
	}
	if status/100 == 1 {
		// An interim response (100 Continue) is followed by the real one.
		return w.readResponse()
	}

	w.body = w.body[:0]
	switch {
	case status == 204 || status == 304:
	case chunked:
		if err := w.readChunked(); err != nil {
			return 0, false, err
		}
	case contentLength >= 0:
		if err := w.readN(contentLength); err != nil {
			return 0, false, fmt.Errorf("read body: %w", err)
		}
	default:
		// Delimited by connection close.
		closeAfter = true
		b, err := io.ReadAll(w.br)
		if err != nil {
			return 0, false, fmt.Errorf("read body: %w", err)
		}
		w.body = append(w.body, b...)
	}
	return status, closeAfter, nil
}

func (w *worker) readLine() (string, error) {
	line, err := w.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return "", errors.New("line too long")
		}
		return "", err
	}
	return strings.TrimRight(string(line), "\r\n"), nil
}

func (w *worker) readN(n int64) error {
	const maxBody = 64 << 20
	if n > maxBody {
		return fmt.Errorf("body of %d bytes is too large", n)
	}
	start := len(w.body)
	w.body = slices.Grow(w.body, int(n))[:start+int(n)]
	_, err := io.ReadFull(w.br, w.body[start:])
	return err
}

func (w *worker) readChunked() error {
	for {
		line, err := w.readLine()
		if err != nil {
			return fmt.Errorf("read chunk size: %w", err)
		}
		sz, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(sz), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			// Trailers end with an empty line.
			for {
				t, err := w.readLine()
				if err != nil {
					return fmt.Errorf("read trailer: %w", err)
				}
				if t == "" {
					return nil
				}
			}
		}
		if err := w.readN(n); err != nil {
			return fmt.Errorf("read chunk: %w", err)
		}
		crlf, err := w.readLine()
		if err != nil || crlf != "" {
			return fmt.Errorf("chunk not followed by CRLF")
		}
	}
}
