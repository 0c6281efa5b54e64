package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"mcpintercept/integrity"
	"mcpintercept/telemetry"
)

// The client side: how the CLI's commands (tools, observe) reach the listener. The errors'
// texts are what the commands print after "mcpintercept COMMAND: ".

// URLOf is the URL a local client reaches admin.listen at: a wildcard address is reached on
// loopback.
func URLOf(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// NormalizeURL accepts http(s)://host:port[/prefix] or a bare host:port (--admin).
func NormalizeURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" || u.User != nil ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", errors.New("want http://HOST:PORT")
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Client calls a running appliance's admin listener: one method per endpoint.
type Client struct {
	// URL is the listener, as URLOf or NormalizeURL give it.
	URL string
	// TokenFile holds the admin token (the endpoints that need it read it on each call).
	TokenFile string
	// TokenName is the token file's name in tool_integrity.dir, for the messages.
	TokenName string

	http *http.Client
}

// NewClient is a client of the listener at url (normalised) with the token in tokenFile.
func NewClient(url, tokenFile, tokenName string) *Client {
	return &Client{URL: url, TokenFile: tokenFile, TokenName: tokenName, http: &http.Client{Timeout: 30 * time.Second}}
}

// RequestError is a request that could not be made (the URL does not make one).
type RequestError struct{ Err error }

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

// TokenError is an admin token that could not be read.
type TokenError struct {
	Err  error
	hint string
}

func (e *TokenError) Error() string {
	return fmt.Sprintf("cannot read the admin token: %v %s", e.Err, e.hint)
}
func (e *TokenError) Unwrap() error { return e.Err }

// UnreachableError is a listener that did not answer.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the appliance's admin listener at %s: %v (is `mcpintercept run` running? admin.listen)", e.URL, e.Err)
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// StatusError is an answer that is not a success: its status, the first line of its body, and
// what the status likely means.
type StatusError struct {
	URL    string
	Code   int
	Status string
	Msg    string
	Hint   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("the admin listener at %s answered %s: %s%s", e.URL, e.Status, Printable(e.Msg), e.Hint)
}

// statusError reads the first line of a failed answer's body (at most limit bytes).
func (c *Client) statusError(resp *http.Response, b []byte) *StatusError {
	msg := strings.TrimSpace(string(b))
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return &StatusError{URL: c.URL, Code: resp.StatusCode, Status: resp.Status, Msg: msg}
}

// token reads the admin token; hint is the TokenError's advice.
func (c *Client) token(hint string) (string, error) {
	tok, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", &TokenError{Err: err, hint: hint}
	}
	return strings.TrimSpace(string(tok)), nil
}

// do sends one request and returns the body of a 2xx answer.
func (c *Client) do(method, path string, body []byte, token bool) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.URL+path, rd)
	if err != nil {
		return nil, &RequestError{err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token {
		tok, err := c.token("(the appliance makes it in tool_integrity.dir when it starts; pass --config or --token-file)")
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &UnreachableError{URL: c.URL, Err: unwrapURLError(err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the admin listener's answer: %v", err)
	}
	if resp.StatusCode/100 != 2 {
		e := c.statusError(resp, b)
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			e.Hint = fmt.Sprintf(" (the token in %s is not the appliance's: pass --config or --token-file with its tool_integrity.dir/%s)", c.TokenFile, c.TokenName)
		case http.StatusNotFound:
			switch path {
			case "/tools", "/tools/pins":
				e.Hint = " (an appliance that predates tool integrity, or no route sets tool_pins)"
			case "/inventory":
				e.Hint = " (an appliance that predates the inventory)"
			}
		}
		return nil, e
	}
	return b, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Tools is GET /tools: what the guard knows, per server, and the answer as it came.
func (c *Client) Tools() ([]integrity.ServerState, []byte, error) {
	b, err := c.do(http.MethodGet, "/tools", nil, false)
	if err != nil {
		return nil, nil, err
	}
	var snap []integrity.ServerState
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, nil, fmt.Errorf("the admin listener's /tools is not a snapshot: %v", err)
	}
	return snap, b, nil
}

// PinFile is GET /tools/pins: a pin file of every definition seen, at the hash seen last.
func (c *Client) PinFile() ([]byte, error) {
	return c.do(http.MethodGet, "/tools/pins", nil, false)
}

// LivePins are the pins of PinFile, read as the appliance reads a pin file.
func (c *Client) LivePins() (map[integrity.PinKey]integrity.DefState, error) {
	live, err := c.PinFile()
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp("", "mcpintercept-live-pins-*.json")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(live)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, werr
	}
	got, err := integrity.PinsOf(tmp.Name())
	if err != nil {
		return nil, fmt.Errorf("the admin listener's /tools/pins does not read as a pin file: %v", err)
	}
	return got, nil
}

// Approve is POST /tools/approve (with the admin token): the event of the approval.
func (c *Client) Approve(a ToolApproval) (ToolEvent, error) {
	body, _ := json.Marshal(a)
	b, err := c.do(http.MethodPost, "/tools/approve", body, true)
	if err != nil {
		return ToolEvent{}, err
	}
	var ev ToolEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		return ToolEvent{}, fmt.Errorf("the admin listener's answer is not an event: %v", err)
	}
	return ev, nil
}

// ObserveToken reads the admin token GET /observe needs (Observe reads it too: calling this
// first tells a missing token from an unreachable listener before anything is sent).
func (c *Client) ObserveToken() error {
	_, err := c.observeToken()
	return err
}

func (c *Client) observeToken() (string, error) {
	return c.token(fmt.Sprintf("(the appliance makes <tool_integrity.dir>/%s when it starts with admin.listen on; pass --config or --token-file)", c.TokenName))
}

// Observe is GET /observe?q (with the admin token): the live stream of records, until ctx ends
// or the appliance ends it. The stream has no timeout.
func (c *Client) Observe(ctx context.Context, q url.Values) (*ObserveStream, error) {
	tok, err := c.observeToken()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/observe?"+q.Encode(), nil)
	if err != nil {
		return nil, &RequestError{err}
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := (&http.Client{}).Do(req) // no timeout: the stream lasts
	if err != nil {
		return nil, &UnreachableError{URL: c.URL, Err: unwrapURLError(err)}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		e := c.statusError(resp, b)
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			e.Hint = fmt.Sprintf(" (the token in %s is not the appliance's: pass --config or --token-file)", c.TokenFile)
		case http.StatusNotFound:
			e.Hint = " (an appliance that predates observe)"
		}
		return nil, e
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &ObserveStream{body: resp.Body, sc: sc}, nil
}

// ObserveStream is GET /observe's answer, a line at a time.
type ObserveStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

// ObserveItem is one line of the stream: a record, the appliance's end line, or a line that does
// not read as a record.
type ObserveItem struct {
	// Line is the line as sent (valid until the next call of Next).
	Line   []byte
	Record telemetry.FlowRecord
	// End: the appliance ended the stream, for Reason.
	End    bool
	Reason string
	// Err: the line is not a record.
	Err error
}

// Next is the stream's next line (keepalives skipped); false at its end (then Err says why).
func (s *ObserveStream) Next() (ObserveItem, bool) {
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if len(line) == 0 {
			continue // keepalive
		}
		var end struct {
			Observe string `json:"observe"`
			Reason  string `json:"reason"`
		}
		if json.Unmarshal(line, &end) == nil && end.Observe == "end" {
			return ObserveItem{Line: line, End: true, Reason: end.Reason}, true
		}
		it := ObserveItem{Line: line}
		it.Err = json.Unmarshal(line, &it.Record)
		return it, true
	}
	return ObserveItem{}, false
}

// Err is why the stream ended: nil when the appliance closed it.
func (s *ObserveStream) Err() error { return s.sc.Err() }

// Close ends the stream.
func (s *ObserveStream) Close() error { return s.body.Close() }
