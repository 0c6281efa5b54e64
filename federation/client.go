package federation

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
)

// Downstream is one configured server as the federation reaches it.
type Downstream struct {
	ID      string
	URL     string
	Timeout time.Duration
	// Headers are the configured headers, in file order: each a literal or a file read at each
	// refresh and each call (a rotated credential takes effect without a restart).
	Headers []Header
	client  *http.Client
}

// Header is one configured header.
type Header struct {
	Name, Value, File string
}

// DialFunc dials a downstream (the bypass dialer: the appliance never intercepts itself).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// NewDownstream builds a downstream's HTTP client: no redirects followed, no proxy from the
// environment, roots from rootsTLS (nil: the system's), dials through dial.
func NewDownstream(id, url string, timeout time.Duration, headers []Header, rootsTLS *tls.Config, dial DialFunc) *Downstream {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		TLSClientConfig:       rootsTLS,
		ForceAttemptHTTP2:     false,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 0, // the call's context bounds it
		DisableCompression:    true,
	}
	if dial == nil {
		tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	}
	return &Downstream{ID: id, URL: url, Timeout: timeout, Headers: headers, client: &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// CloseIdle closes the downstream's idle connections.
func (d *Downstream) CloseIdle() { d.client.CloseIdleConnections() }

// headerValues reads the configured headers (files now).
func (d *Downstream) headerValues() (http.Header, error) {
	h := http.Header{}
	for _, c := range d.Headers {
		v := c.Value
		if c.File != "" {
			b, err := os.ReadFile(c.File)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", c.Name, err)
			}
			v = strings.TrimRight(string(b), "\r\n")
			if strings.ContainsAny(v, "\r\n\x00") {
				return nil, fmt.Errorf("header %s: file %s holds a line break or NUL", c.Name, c.File)
			}
		}
		h.Set(c.Name, v)
	}
	return h, nil
}

// rpcRequest is one JSON-RPC request to the downstream, in a protocol version.
type rpcRequest struct {
	version string // "" for none (initialize's own)
	method  string
	name    string // Mcp-Name (tools/call)
	session string
	body    []byte
	notify  bool // a notification: 202 expected
}

// response is what one POST came back with.
type response struct {
	status  int
	session string
	msg     *mcp.Message // the terminal response (nil for a notification's 202)
	body    []byte
	n       int // bytes read
}

// outcome errors: after the request started, the final state is unknown.
type uncertainError struct {
	reason string // "timeout" | "reset" | "malformed" | "oversized" | "sse" | "http" | "shutdown" | "redirect"
	detail string
}

func (e *uncertainError) Error() string { return e.reason + ": " + e.detail }

func uncertain(reason, format string, a ...any) error {
	return &uncertainError{reason: reason, detail: fmt.Sprintf(format, a...)}
}

// post sends r and reads its terminal response (bounded by limit): a JSON body, or an SSE stream
// whose only messages before the response are notifications the call can do without
// (notifications/message); a server request, a progress notification, a response to another id
// or a stream that ends without its response are unsupported. wantID is the request's id as
// JSON text.
func (d *Downstream) post(ctx context.Context, r rpcRequest, wantID string, limit int64) (*response, error) {
	hdr, err := d.headerValues()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(r.body))
	if err != nil {
		return nil, err
	}
	req.Header = hdr
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if r.version != "" {
		req.Header.Set("MCP-Protocol-Version", r.version)
	}
	if r.version >= string(mcp.V20260728) {
		req.Header.Set("Mcp-Method", r.method)
		if r.name != "" {
			req.Header.Set("Mcp-Name", encodeHeaderValue(r.name))
		}
	}
	if r.session != "" {
		req.Header.Set("Mcp-Session-Id", r.session)
	}
	if tp := traceparentOf(ctx); tp != "" {
		req.Header.Set("traceparent", tp)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	defer resp.Body.Close()
	out := &response{status: resp.StatusCode, session: resp.Header.Get("Mcp-Session-Id")}
	if r.notify {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		if resp.StatusCode/100 != 2 {
			return out, uncertain("http", "notification answered HTTP %d", resp.StatusCode)
		}
		return out, nil
	}
	if resp.StatusCode/100 == 3 {
		return out, uncertain("redirect", "HTTP %d (redirects are not followed)", resp.StatusCode)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		body, n, err := readBounded(ctx, resp.Body, limit)
		out.n = n
		if err != nil {
			return out, err
		}
		out.body = body
		m, err := mcp.DecodeMessage(body, mcp.DecodeOptions{MaxSize: int(limit)})
		if err != nil {
			return out, uncertain("malformed", "HTTP %d: %v", resp.StatusCode, err)
		}
		if err := correlated(m, wantID); err != nil {
			return out, err
		}
		out.msg = m
		return out, nil
	case "text/event-stream":
		if resp.StatusCode != http.StatusOK {
			return out, uncertain("http", "HTTP %d with an event stream", resp.StatusCode)
		}
		return d.readStream(ctx, resp.Body, out, wantID, limit)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return out, uncertain("http", "HTTP %d without a JSON-RPC answer (Content-Type %q)", resp.StatusCode, resp.Header.Get("Content-Type"))
}

// correlated checks m answers wantID.
func correlated(m *mcp.Message, wantID string) error {
	if m.Kind != mcp.KindResponse && m.Kind != mcp.KindError {
		return uncertain("malformed", "answer is a %s, not a response", m.Kind)
	}
	if string(m.ID) != wantID {
		return uncertain("malformed", "answer's id %s is not the request's %s", clip(string(m.ID)), wantID)
	}
	return nil
}

// readStream reads an SSE answer up to its terminal response.
func (d *Downstream) readStream(ctx context.Context, body io.Reader, out *response, wantID string, limit int64) (*response, error) {
	p := exchange.NewSSEParser(int(limit))
	buf := make([]byte, 32<<10)
	for {
		k, rerr := body.Read(buf)
		out.n += k
		if int64(out.n) > limit {
			return out, uncertain("oversized", "event stream over %d bytes before its response", limit)
		}
		evs, perr := p.Feed(buf[:k])
		for i := range evs {
			ev := &evs[i]
			if !ev.HasData || strings.TrimSpace(ev.Data) == "" {
				continue
			}
			m, err := mcp.DecodeMessage([]byte(ev.Data), mcp.DecodeOptions{MaxSize: int(limit)})
			if err != nil {
				return out, uncertain("malformed", "event stream: %v", err)
			}
			switch {
			case m.Kind == mcp.KindNotification && m.Method == "notifications/message":
				continue // a log line: nothing the call's result depends on
			case m.Kind == mcp.KindNotification:
				return out, uncertain("sse", "event stream carries %s, which the federation does not relay", clip(m.Method))
			case m.Kind == mcp.KindRequest:
				return out, uncertain("sse", "event stream carries a server request (%s) the federation cannot answer", clip(m.Method))
			}
			if err := correlated(m, wantID); err != nil {
				return out, err
			}
			out.msg, out.body = m, []byte(ev.Data)
			return out, nil
		}
		if perr != nil {
			return out, uncertain("oversized", "event stream: %v", perr)
		}
		if rerr != nil {
			if rerr == io.EOF {
				return out, uncertain("malformed", "event stream ended without the response")
			}
			return out, transportError(ctx, rerr)
		}
	}
}

// readBounded reads all of r, refusing more than limit bytes.
func readBounded(ctx context.Context, r io.Reader, limit int64) ([]byte, int, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, len(b), transportError(ctx, err)
	}
	if int64(len(b)) > limit {
		return nil, len(b), uncertain("oversized", "answer over %d bytes", limit)
	}
	return b, len(b), nil
}

// transportError classifies a failure once the request may have reached the downstream.
func transportError(ctx context.Context, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return uncertain("timeout", "%v", err)
	case errors.Is(ctx.Err(), context.Canceled):
		return uncertain("shutdown", "%v", err)
	}
	return uncertain("reset", "%v", err)
}

// deleteSession sends the one bounded cleanup DELETE for session.
func (d *Downstream) deleteSession(ctx context.Context, session, version string) error {
	hdr, err := d.headerValues()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, d.URL, nil)
	if err != nil {
		return err
	}
	req.Header = hdr
	req.Header.Set("Mcp-Session-Id", session)
	if version != "" {
		req.Header.Set("MCP-Protocol-Version", version)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusMethodNotAllowed {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// encodeHeaderValue is v as an Mcp-Name header: as is when printable ASCII, else =?base64?…?=.
func encodeHeaderValue(v string) string {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "=?base64?" + b64(v) + "?="
		}
	}
	if strings.HasPrefix(v, "=?") || strings.TrimSpace(v) != v {
		return "=?base64?" + b64(v) + "?="
	}
	return v
}

func clip(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strconv.Quote(s)
}

// requestBody is a JSON-RPC request (or notification when id is "") as bytes.
func requestBody(id, method string, params any) []byte {
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0",`)
	if id != "" {
		b.WriteString(`"id":`)
		b.WriteString(id)
		b.WriteString(",")
	}
	b.WriteString(`"method":`)
	b.Write(mcp.Quote(method))
	if params != nil {
		p, _ := json.Marshal(params)
		b.WriteString(`,"params":`)
		b.Write(p)
	}
	b.WriteString("}")
	return b.Bytes()
}
