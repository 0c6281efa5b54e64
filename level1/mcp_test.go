package level1

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func mustHead(t testing.TB, s string) *Head {
	t.Helper()
	h, err := NewReader(strings.NewReader(s), Limits{}).ReadRequestHead()
	if err != nil {
		t.Fatalf("parse %q: %v", s, err)
	}
	return h
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		head      string
		kind      string
		transport string
		check     func(t *testing.T, info *RequestInfo)
	}{
		{
			name:      "2026-07-28 stateless tools/call with encoded name",
			head:      "POST /mcp?x=1 HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: =?base64?5aSp5rCX?=\r\nOrigin: http://localhost\r\n\r\n",
			kind:      KindMCP,
			transport: TransportStreamable,
			check: func(t *testing.T, info *RequestInfo) {
				want := RequestInfo{Method: "POST", Path: "/mcp", MCPMethod: "tools/call", MCPName: "天気",
					ProtocolVersion: "2026-07-28", Accept: "application/json, text/event-stream",
					ContentType: "application/json", Origin: "http://localhost", Kind: KindMCP, Transport: TransportStreamable}
				got := *info
				got.Headers = nil
				if !reflect.DeepEqual(got, want) {
					t.Errorf("info = %+v\nwant   %+v", got, want)
				}
				if info.Headers["mcp-method"] != "tools/call" || info.Headers["host"] != "s" {
					t.Errorf("headers = %v", info.Headers)
				}
			},
		},
		{
			name:      "2025-06-18 session header only",
			head:      "GET /mcp HTTP/1.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: abc\r\nMCP-Protocol-Version: 2025-06-18\r\n\r\n",
			kind:      KindMCP,
			transport: TransportStreamable,
			check: func(t *testing.T, info *RequestInfo) {
				sum := sha256.Sum256([]byte("abc"))
				if info.SessionHash != hex.EncodeToString(sum[:])[:12] {
					t.Errorf("SessionHash = %q", info.SessionHash)
				}
				if info.ProtocolVersion != "2025-06-18" {
					t.Errorf("ProtocolVersion = %q", info.ProtocolVersion)
				}
			},
		},
		{
			name:      "2025-03-26 initialize: json post accepting sse",
			head:      "POST /mcp HTTP/1.1\r\ncontent-type: application/json; charset=utf-8\r\naccept: application/json, text/event-stream\r\n\r\n",
			kind:      KindMCP,
			transport: TransportStreamable,
		},
		{
			name:      "2024-11-05 sse stream",
			head:      "GET /sse HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n",
			kind:      KindMCP,
			transport: TransportSSEStream,
		},
		{
			name:      "2024-11-05 sse stream with prefix and trailing slash",
			head:      "GET /api/v1/sse/ HTTP/1.1\r\nAccept: TEXT/EVENT-STREAM\r\n\r\n",
			kind:      KindMCP,
			transport: TransportSSEStream,
		},
		{
			name:      "2024-11-05 post, typescript endpoint",
			head:      "POST /message?sessionId=0f3c HTTP/1.1\r\nContent-Type: application/json\r\n\r\n",
			kind:      KindMCP,
			transport: TransportSSEPost,
			check: func(t *testing.T, info *RequestInfo) {
				if info.Path != "/message" {
					t.Errorf("Path = %q", info.Path)
				}
			},
		},
		{
			name:      "2024-11-05 post, python endpoint",
			head:      "POST /messages/?session_id=0f3c HTTP/1.1\r\nContent-Type: application/json\r\n\r\n",
			kind:      KindMCP,
			transport: TransportSSEPost,
		},
		{
			name: "post to messages without session query",
			head: "POST /messages HTTP/1.1\r\nContent-Type: application/json\r\n\r\n",
			kind: KindHTTP,
		},
		{
			name: "plain json api",
			head: "POST /api HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json\r\n\r\n",
			kind: KindHTTP,
		},
		{
			name: "sse without the sse path",
			head: "GET /events HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n",
			kind: KindHTTP,
		},
		{
			name: "browser get",
			head: "GET /index.html HTTP/1.1\r\nHost: x\r\nCookie: s=1\r\n\r\n",
			kind: KindHTTP,
			check: func(t *testing.T, info *RequestInfo) {
				if _, ok := info.Headers["cookie"]; ok {
					t.Error("cookie reached Headers")
				}
			},
		},
		{
			name: "absolute-form target",
			head: "POST http://h:8080/mcp?a=b HTTP/1.1\r\nMcp-Method: ping\r\n\r\n",
			kind: KindMCP, transport: TransportStreamable,
			check: func(t *testing.T, info *RequestInfo) {
				if info.Path != "/mcp" {
					t.Errorf("Path = %q", info.Path)
				}
			},
		},
		{
			name: "authorization reduced to its scheme",
			head: "POST /mcp HTTP/1.1\r\nMcp-Method: ping\r\nAuthorization: bearer eyJsecret\r\n\r\n",
			kind: KindMCP, transport: TransportStreamable,
			check: func(t *testing.T, info *RequestInfo) {
				if !info.AuthPresent || info.AuthScheme != "Bearer" {
					t.Errorf("auth = %v %q", info.AuthPresent, info.AuthScheme)
				}
			},
		},
		{
			name: "bare credential is not taken for a scheme",
			head: "POST /mcp HTTP/1.1\r\nMcp-Method: ping\r\nAuthorization: sk-live-123456\r\n\r\n",
			kind: KindMCP, transport: TransportStreamable,
			check: func(t *testing.T, info *RequestInfo) {
				if !info.AuthPresent || info.AuthScheme != "other" {
					t.Errorf("auth = %v %q", info.AuthPresent, info.AuthScheme)
				}
			},
		},
		{
			name: "first value wins",
			head: "POST /mcp HTTP/1.1\r\nMcp-Method: tools/list\r\nMcp-Method: tools/call\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
			kind: KindMCP, transport: TransportStreamable,
			check: func(t *testing.T, info *RequestInfo) {
				if info.MCPMethod != "tools/list" || info.Headers["x-a"] != "1" {
					t.Errorf("MCPMethod = %q, x-a = %q", info.MCPMethod, info.Headers["x-a"])
				}
			},
		},
		{
			name: "invalid encoded name",
			head: "POST /mcp HTTP/1.1\r\nMcp-Method: tools/call\r\nMcp-Name: =?base64?not base64!?=\r\n\r\n",
			kind: KindMCP, transport: TransportStreamable,
			check: func(t *testing.T, info *RequestInfo) {
				var me *MalformedError
				if !errors.As(info.Err, &me) || info.MCPName != "" {
					t.Errorf("Err = %v, MCPName = %q", info.Err, info.MCPName)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := Classify(mustHead(t, tt.head))
			if info.Kind != tt.kind || info.Transport != tt.transport {
				t.Errorf("kind, transport = %q %q, want %q %q", info.Kind, info.Transport, tt.kind, tt.transport)
			}
			if tt.check != nil {
				tt.check(t, info)
			}
		})
	}
}

func TestRequestInfoHoldsNoSecret(t *testing.T) {
	const (
		bearer  = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXBheWxvYWQ"
		session = "sess-7f1c2a9e-4b7d-4e3f-a1c2-secret"
	)
	secrets := []string{bearer, session, "cookie-value-42", "proxy-cred-9", "k-api-555", "tok-777", "pw-888", "s3cr3t-999", "sessaff-1"}
	head := "POST /mcp HTTP/1.1\r\n" +
		"Authorization: Bearer " + bearer + "\r\n" +
		"Mcp-Session-Id: " + session + "\r\n" +
		"mcp-session-id: " + session + "\r\n" +
		"Cookie: sid=cookie-value-42\r\n" +
		"Proxy-Authorization: Basic proxy-cred-9\r\n" +
		"X-Api-Key: k-api-555\r\n" +
		"X-Auth-Token: tok-777\r\n" +
		"X-Password: pw-888\r\n" +
		"X-Client-Secret: s3cr3t-999\r\n" +
		"X-Session-Affinity: sessaff-1\r\n" +
		"Mcp-Method: tools/call\r\n" +
		"Content-Type: application/json\r\n\r\n"
	info := Classify(mustHead(t, head))
	var strs []string
	v := reflect.ValueOf(*info)
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.String {
			strs = append(strs, v.Type().Field(i).Name+"="+f.String())
		}
	}
	for k, val := range info.Headers {
		strs = append(strs, "Headers["+k+"]="+val)
	}
	if info.Err != nil {
		strs = append(strs, info.Err.Error())
	}
	for _, s := range strs {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%s leaks %q", s, secret)
			}
		}
	}
	if !info.AuthPresent || info.AuthScheme != "Bearer" || info.SessionHash == "" {
		t.Errorf("auth %v %q session %q", info.AuthPresent, info.AuthScheme, info.SessionHash)
	}
	if info.Headers["mcp-method"] != "tools/call" {
		t.Errorf("ordinary header dropped: %v", info.Headers)
	}
}

// TestClassifyAccept: issue 8 case 3. Every Accept line and every value counts, "*/*" and
// "text/*" accept text/event-stream, and q=0 means not acceptable.
func TestClassifyAccept(t *testing.T) {
	tests := []struct {
		name   string
		accept string // header lines, each "Accept: …\r\n"
		kind   string
	}{
		{name: "both in one line", accept: "Accept: application/json, text/event-stream\r\n", kind: KindMCP},
		{name: "split over two lines", accept: "Accept: application/json\r\nAccept: text/event-stream\r\n", kind: KindMCP},
		{name: "star slash star", accept: "Accept: */*\r\n", kind: KindMCP},
		{name: "text slash star with q", accept: "Accept: application/json;q=0.9, TEXT/*; q=0.5\r\n", kind: KindMCP},
		{name: "event-stream with parameters", accept: "accept: application/json\r\naccept: text/event-stream ; charset=utf-8 ; q=1\r\n", kind: KindMCP},
		{name: "q=0 refuses it", accept: "Accept: application/json, text/event-stream;q=0\r\n", kind: KindHTTP},
		{name: "q=0.000 refuses */*", accept: "Accept: */*; q=0.000\r\n", kind: KindHTTP},
		{name: "json only", accept: "Accept: application/json\r\n", kind: KindHTTP},
		{name: "substring is not a media type", accept: "Accept: application/x-text/event-streamish\r\n", kind: KindHTTP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := Classify(mustHead(t, "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\n"+tt.accept+"\r\n"))
			if info.Kind != tt.kind {
				t.Errorf("Kind = %q, want %q (Accept %q)", info.Kind, tt.kind, info.Accept)
			}
		})
	}
	info := Classify(mustHead(t, "GET /sse HTTP/1.1\r\nAccept: text/html\r\nAccept: */*\r\n\r\n"))
	if info.Transport != TransportSSEStream || info.Accept != "text/html, */*" || info.Headers["accept"] != info.Accept {
		t.Errorf("sse stream behind a second Accept line: %+v", info)
	}
}

// TestClassifyRedactsURI: issue 8 case 8. For resources/read, Mcp-Name is the resource URI; its
// userinfo, query and fragment never reach RequestInfo (and so no log, label or rule), whether
// sent plain or =?base64?…?= encoded (mcp.TestRedactURI covers the cuts).
func TestClassifyRedactsURI(t *testing.T) {
	secret := "https://user:pass@host/x?X-Amz-Signature=abc&access_token=def#frag"
	enc := "=?base64?" + base64.StdEncoding.EncodeToString([]byte(secret)) + "?="
	for _, v := range []string{secret, enc} {
		info := Classify(mustHead(t, "POST /mcp HTTP/1.1\r\nMcp-Method: resources/read\r\nMcp-Name: "+v+"\r\n\r\n"))
		if info.MCPName != "https://host/x" || info.Headers["mcp-name"] != "https://host/x" {
			t.Errorf("Mcp-Name %q: MCPName %q, headers %q", v, info.MCPName, info.Headers["mcp-name"])
		}
	}
}
