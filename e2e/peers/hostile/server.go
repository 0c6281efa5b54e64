package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// answerWait bounds how long a stream waits for the client's answer to a request of this server:
// a hang guard only (a test waits on events, never on this).
const answerWait = 60 * time.Second

// maxBody bounds a request body read.
const maxBody = 1 << 20

type server struct {
	canary string
	log    *slog.Logger

	mu       sync.Mutex
	sessions int
	armed    map[string]bool                 // early mode -> the next connection gets the early write
	streams  map[string]chan []byte          // session -> GET stream (whole SSE events)
	waiting  map[string]chan json.RawMessage // id of a request of ours -> the client's answer
	lastID   int64                           // the last numeric request id seen (the Go SDK counts up)
	nextReq  int
}

func newServer(canary string, log *slog.Logger) *server {
	return &server{canary: canary, log: log, armed: map[string]bool{}, streams: map[string]chan []byte{},
		waiting: map[string]chan json.RawMessage{}}
}

// request is one parsed HTTP request.
type request struct {
	method, path, query string
	header              http.Header
	body                []byte
}

func readRequest(br *bufio.Reader) (*request, error) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, fmt.Errorf("read request: %w", err)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return &request{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, header: r.Header, body: body}, nil
}

// segments splits the path into the scenario and its arguments.
func (r *request) segments() []string {
	return strings.Split(strings.Trim(r.path, "/"), "/")
}

// message is the part of a JSON-RPC message this server reads; the id stays as written.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
}

func decodeMessages(b []byte) []message {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var batch []message
		json.Unmarshal(b, &batch)
		return batch
	}
	var m message
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return []message{m}
}

// handle answers one request; false when the connection must end (or was taken over).
func (s *server) handle(c net.Conn, br *bufio.Reader, early string, r *request) bool {
	msgs := decodeMessages(r.body)
	s.logRequest(r, msgs)
	seg := r.segments()
	switch {
	case seg[0] == "legacy":
		return s.legacy(c, br, r, msgs)
	case seg[0] == "identity":
		return s.identity(c, br, r, msgs)
	case seg[0] == "empty":
		return s.empty(c, seg, r)
	case r.method == http.MethodGet:
		return s.standalone(c, br, r)
	case r.method == http.MethodDelete:
		return writeResponse(c, 200, "", nil, nil) == nil
	case r.method != http.MethodPost:
		return writeResponse(c, 405, "", nil, nil) == nil
	case len(msgs) == 0:
		return writeResponse(c, 400, "text/plain", nil, []byte("not JSON-RPC\n")) == nil
	case msgs[0].Method == "":
		s.answered(msgs)
		return writeResponse(c, 202, "", nil, nil) == nil
	case msgs[0].ID == nil:
		return s.notification(c, early, msgs[0])
	}
	return s.call(c, br, early, seg, r, msgs[0])
}

func (s *server) logRequest(r *request, msgs []message) {
	var parts []string
	for _, m := range msgs {
		parts = append(parts, fmt.Sprintf("rpc=%s id=%s", m.Method, m.ID))
	}
	fmt.Fprintf(os.Stderr, "REQ %s %s %s\n", r.method, r.path, strings.Join(parts, " "))
}

// answered hands the client's answers to the streams waiting for them.
func (s *server) answered(msgs []message) {
	for _, m := range msgs {
		kind := "result"
		detail := m.Result
		if m.Error != nil {
			kind, detail = "error", m.Error
		}
		fmt.Fprintf(os.Stderr, "ANSWER id=%s %s %s\n", m.ID, kind, oneLine(detail))
		s.mu.Lock()
		ch := s.waiting[string(m.ID)]
		delete(s.waiting, string(m.ID))
		s.mu.Unlock()
		if ch != nil {
			ch <- m.Result
		}
	}
}

func oneLine(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return strconv.Quote(string(b))
	}
	return buf.String()
}

func (s *server) notification(c net.Conn, early string, m message) bool {
	if m.Method != "notifications/initialized" {
		return writeResponse(c, 202, "", nil, nil) == nil
	}
	if early != "" {
		s.mu.Lock()
		s.armed[early] = true
		s.mu.Unlock()
		// The next request must come on a new connection: the one the early bytes wait on.
		writeResponse(c, 202, "", http.Header{"Connection": {"close"}}, nil)
		return false
	}
	return writeResponse(c, 202, "", nil, nil) == nil
}

// disarm reports whether an early write is due on this connection, once per arming.
func (s *server) disarm(early string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	armed := s.armed[early]
	s.armed[early] = false
	return armed
}

func (s *server) noteID(id json.RawMessage) {
	if n, err := strconv.ParseInt(string(id), 10, 64); err == nil {
		s.mu.Lock()
		s.lastID = n
		s.mu.Unlock()
	}
}

// call answers a request of the client, as the scenario says.
func (s *server) call(c net.Conn, br *bufio.Reader, early string, seg []string, r *request, m message) bool {
	s.noteID(m.ID)
	if early != "" && s.earlyDone(c) {
		// This request already got its "answer" (the early bytes); what it is owed now would
		// arrive unasked. The early sampling request's answer completes the call on the stream.
		if early == "early-sampling" {
			s.completeLater(earlyID, r.header.Get("Mcp-Session-Id"), m.ID, "the early call")
		}
		return true
	}
	switch m.Method {
	case "initialize":
		return s.initialize(c, m)
	case "ping":
		return writeJSON(c, nil, result(m.ID, `{}`))
	case "tools/list":
		return s.toolsList(c, seg, m)
	case "tools/call":
		return s.toolsCall(c, br, seg, r, m)
	}
	return writeJSON(c, nil, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, m.ID))
}

// earlyConns marks the connections that got the early write.
var earlyConns sync.Map

func (s *server) earlyDone(c net.Conn) bool {
	_, ok := earlyConns.LoadAndDelete(c)
	return ok
}

func (s *server) initialize(c net.Conn, m message) bool {
	var p struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	json.Unmarshal(m.Params, &p)
	v := p.ProtocolVersion
	switch v {
	case "2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25":
	default:
		v = "2025-11-25"
	}
	s.mu.Lock()
	s.sessions++
	sid := fmt.Sprintf("hostile-session-%d", s.sessions)
	s.mu.Unlock()
	body := result(m.ID, `{"protocolVersion":"`+v+`","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1.0.0"}}`)
	return writeJSON(c, http.Header{"Mcp-Session-Id": {sid}}, body)
}

func result(id json.RawMessage, res string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, res)
}

// textResult is a tools/call result with one text content.
func textResult(text string) string {
	b, _ := json.Marshal(text)
	return `{"content":[{"type":"text","text":` + string(b) + `}]}`
}

const (
	echoTool   = `{"name":"echo","description":"Echoes text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}`
	deleteTool = `{"name":"denied_delete","description":"A target for deny rules.","inputSchema":{"type":"object","properties":{"path":{"type":"string"}}}}`
	// recursiveSchema refers to itself: a validator that follows $ref without a bound recurses
	// until the stack is gone.
	recursiveSchema = `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`
)

// anyOfSchema is anyOf nested depth deep (each level two references to the level below, the
// bottom one unsatisfiable by {}): about 60 bytes per level, 2^depth paths for a validator that
// tries every branch.
func anyOfSchema(depth int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","$defs":{"d0":{"required":["never"]}`)
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, `,"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, i-1, i-1)
	}
	fmt.Fprintf(&b, `},"$ref":"#/$defs/d%d"}`, depth)
	return b.String()
}

func (s *server) toolsList(c net.Conn, seg []string, m message) bool {
	tools := echoTool + "," + deleteTool
	id := string(m.ID)
	switch seg[0] {
	case "respell":
		id = respell(m.ID)
	case "schema":
		tools = `{"name":"recursive","description":"A schema that refers to itself.","inputSchema":` + recursiveSchema + `},` +
			`{"name":"anyof19","description":"Nested anyOf, 19 deep.","inputSchema":` + anyOfSchema(19) + `}`
	}
	return writeJSON(c, nil, result(json.RawMessage(id), `{"tools":[`+tools+`]}`))
}

// respell writes an integer id as the same number with a fraction: 1 becomes 1.0.
func respell(id json.RawMessage) string {
	if _, err := strconv.ParseInt(string(id), 10, 64); err == nil {
		return string(id) + ".0"
	}
	return string(id)
}

type callParams struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

func (s *server) toolsCall(c net.Conn, br *bufio.Reader, seg []string, r *request, m message) bool {
	var p callParams
	json.Unmarshal(m.Params, &p)
	sid := r.header.Get("Mcp-Session-Id")
	switch seg[0] {
	case "json-sampling":
		rid := s.serverRequestID()
		s.completeLater(rid, sid, m.ID, "json-sampling")
		return writeJSON(c, nil, samplingRequest(rid))
	case "json-batch":
		rid := s.serverRequestID()
		s.expect(rid)
		return writeJSON(c, nil, "["+samplingRequest(rid)+","+result(m.ID, textResult("the batch's own result"))+"]")
	case "sse":
		return s.sseCall(c, seg, m)
	case "respell":
		return writeJSON(c, nil, result(json.RawMessage(respell(m.ID)), textResult("the key is "+s.canary)))
	}
	return writeJSON(c, nil, result(m.ID, textResult(s.toolText(p))))
}

func (s *server) toolText(p callParams) string {
	switch p.Name {
	case "echo":
		t, _ := p.Arguments["text"].(string)
		return t
	case "denied_delete":
		fmt.Fprintf(os.Stderr, "TOOLRUN denied_delete\n")
		return "deleted"
	}
	fmt.Fprintf(os.Stderr, "TOOLRUN %s\n", p.Name)
	return "hostile ran " + p.Name
}

func (s *server) serverRequestID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextReq++
	return fmt.Sprintf(`"hostile-%d"`, s.nextReq)
}

func samplingRequest(id string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"say hi"}}],"maxTokens":5}}`
}

// expect registers a request of ours whose answer is awaited.
func (s *server) expect(id string) chan json.RawMessage {
	ch := make(chan json.RawMessage, 1)
	s.mu.Lock()
	s.waiting[id] = ch
	s.mu.Unlock()
	return ch
}

// completeLater sends the call's result on the session's GET stream once the client answered
// our request id (a JSON body cannot carry both).
func (s *server) completeLater(id, sid string, callID json.RawMessage, what string) {
	ch := s.expect(id)
	go func() {
		select {
		case <-ch:
		case <-time.After(answerWait):
			return
		}
		s.mu.Lock()
		stream := s.streams[sid]
		s.mu.Unlock()
		if stream == nil {
			fmt.Fprintf(os.Stderr, "NOSTREAM for %s (session %q)\n", what, sid)
			return
		}
		stream <- sseEvent("message", "", result(callID, textResult("sampled, then answered on the GET stream")))
	}()
}

func sseEvent(name, prefix, data string) []byte {
	var b bytes.Buffer
	if name != "" {
		b.WriteString("event: " + name + "\n")
	}
	b.WriteString("data:" + prefix + data + "\n\n")
	return b.Bytes()
}

// standalone serves the GET stream of a session: events pushed to it until the client leaves.
func (s *server) standalone(c net.Conn, br *bufio.Reader, r *request) bool {
	sid := r.header.Get("Mcp-Session-Id")
	if sid == "" || !strings.Contains(r.header.Get("Accept"), "text/event-stream") {
		return writeResponse(c, 405, "", nil, nil) == nil
	}
	ch := make(chan []byte, 8)
	s.mu.Lock()
	s.streams[sid] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.streams[sid] == ch {
			delete(s.streams, sid)
		}
		s.mu.Unlock()
	}()
	if err := writeHead(c, 200, "text/event-stream", nil, true); err != nil {
		return false
	}
	gone := clientGone(br)
	for {
		select {
		case ev := <-ch:
			if writeChunk(c, ev) != nil {
				return false
			}
		case <-gone:
			return false
		}
	}
}

// clientGone is closed when the client sends anything more or closes: on a stream it sends
// nothing, so either means it is done with it.
func clientGone(br *bufio.Reader) chan struct{} {
	ch := make(chan struct{})
	go func() {
		br.ReadByte()
		close(ch)
	}()
	return ch
}

// wsPrefix is what comes between "data:" and the JSON value: whitespace the Go SDK client trims
// (bytes.TrimSpace) that an SSE parser by the WHATWG rules keeps, or ends the line at.
var wsPrefix = map[string]string{"vt": " \v", "ff": " \f", "nbsp": " \u00a0", "cr": "\r"}

// sseCall answers tools/call as a stream whose one value hides behind wsPrefix.
func (s *server) sseCall(c net.Conn, seg []string, m message) bool {
	if len(seg) < 3 || wsPrefix[seg[1]] == "" {
		return writeResponse(c, 404, "text/plain", nil, []byte("want /sse/vt|ff|nbsp|cr/sampling|canary\n")) == nil
	}
	prefix := wsPrefix[seg[1]]
	if err := writeHead(c, 200, "text/event-stream", nil, true); err != nil {
		return false
	}
	if seg[2] == "canary" {
		writeChunk(c, sseEvent("message", prefix, result(m.ID, textResult("the key is "+s.canary))))
		return endChunks(c) == nil
	}
	rid := s.serverRequestID()
	ch := s.expect(rid)
	if writeChunk(c, sseEvent("message", prefix, samplingRequest(rid))) != nil {
		return false
	}
	text := "the client answered the sampling request"
	select {
	case <-ch:
	case <-time.After(answerWait):
		text = "no answer to the sampling request"
	}
	writeChunk(c, sseEvent("message", "", result(m.ID, textResult(text))))
	return endChunks(c) == nil
}

// earlyID is the id of the early sampling request.
const earlyID = `"hostile-early"`

// earlyResponse is a whole HTTP response written before any request: a sampling request, or a
// tools/call result with the canary for the id the Go SDK client will use next.
func (s *server) earlyResponse(early string) []byte {
	body := samplingRequest(earlyID)
	if early == "early-canary" {
		s.mu.Lock()
		next := s.lastID + 1
		s.mu.Unlock()
		body = result(json.RawMessage(strconv.FormatInt(next, 10)), textResult("the key is "+s.canary))
	}
	return fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// empty answers every POST with an empty body: 202 Accepted, application/json, chunked (as the
// tmcp server answers every legacy-SSE POST), or 200 with Content-Length 0.
func (s *server) empty(c net.Conn, seg []string, r *request) bool {
	if len(seg) > 1 && seg[1] == "200" {
		return writeResponse(c, 200, "application/json", nil, []byte{}) == nil
	}
	if writeHead(c, 202, "application/json", nil, true) != nil {
		return false
	}
	return endChunks(c) == nil
}

func writeJSON(c net.Conn, h http.Header, body string) bool {
	return writeResponse(c, 200, "application/json", h, []byte(body)) == nil
}

// writeResponse writes a whole response with Content-Length (none for 204/1xx).
func writeResponse(c net.Conn, status int, ctype string, h http.Header, body []byte) error {
	var b bytes.Buffer
	head(&b, status, ctype, h)
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	_, err := c.Write(b.Bytes())
	return err
}

func head(b *bytes.Buffer, status int, ctype string, h http.Header) {
	fmt.Fprintf(b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	if ctype != "" {
		fmt.Fprintf(b, "Content-Type: %s\r\n", ctype)
	}
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(b, "%s: %s\r\n", k, v)
		}
	}
}

func writeHead(c net.Conn, status int, ctype string, h http.Header, chunked bool) error {
	var b bytes.Buffer
	head(&b, status, ctype, h)
	if chunked {
		b.WriteString("Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n")
	}
	b.WriteString("\r\n")
	_, err := c.Write(b.Bytes())
	return err
}

// writeChunk writes one chunk: one event per write, as a real server flushes them.
func writeChunk(c net.Conn, p []byte) error {
	_, err := c.Write(fmt.Appendf(nil, "%x\r\n%s\r\n", len(p), p))
	return err
}

func endChunks(c net.Conn) error {
	_, err := io.WriteString(c, "0\r\n\r\n")
	return err
}
