// Command framingsrv is a raw MCP server (Streamable HTTP, sessions) for the issue 29 framing lab
// test: it answers initialize, tools/list and notifications as any server does, and a tools/call
// with an SSE stream framed as HTTP/1.0 with Transfer-Encoding: chunked, whose chunks carry a
// sampling/createMessage request and then the call's result. Node's fetch (undici, under the
// TypeScript SDK client) de-chunks that body; a reader that takes the RFC's HTTP/1.0 rule and
// reads it to the close (as Go's net/http does) sees the chunk-size lines inside the stream, and
// the first chunk ends in the middle of "data:", so the sampling request is no event to it.
//
//	framingsrv -listen ADDR    prints READY once listening
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

func main() {
	listen := flag.String("listen", "", "address to listen on")
	flag.Parse()
	if *listen == "" {
		fmt.Fprintln(os.Stderr, "usage: framingsrv -listen ADDR")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("READY")
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c)
	}
}

// message is what this server reads of a JSON-RPC message.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params struct {
		ProtocolVersion string `json:"protocolVersion"`
	} `json:"params"`
}

func serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return
		}
		switch r.Method {
		case "POST":
		case "DELETE":
			writeJSON(c, 200, "", "")
			continue
		default: // no GET stream
			writeJSON(c, 405, "", "")
			continue
		}
		var m message
		if err := json.Unmarshal(body, &m); err != nil {
			writeJSON(c, 400, "", "")
			continue
		}
		id := string(m.ID)
		switch {
		case m.Method == "initialize":
			v := m.Params.ProtocolVersion
			if v == "" {
				v = "2025-11-25"
			}
			vj, _ := json.Marshal(v)
			writeJSON(c, 200, "framingsrv-session-1", `{"jsonrpc":"2.0","id":`+id+`,"result":{"protocolVersion":`+string(vj)+
				`,"capabilities":{"tools":{}},"serverInfo":{"name":"framingsrv","version":"1.0.0"}}}`)
		case m.Method == "tools/list":
			writeJSON(c, 200, "", `{"jsonrpc":"2.0","id":`+id+`,"result":{"tools":[{"name":"framing","description":"answers on an HTTP/1.0 chunked stream","inputSchema":{"type":"object"}}]}}`)
		case m.Method == "tools/call":
			writeFramed(c, id)
			return // the body runs to the close for a reader that takes the HTTP/1.0 rule
		case m.Method == "" || id == "": // a response (the sampling answer) or a notification
			writeJSON(c, 202, "", "")
		default:
			writeJSON(c, 200, "", `{"jsonrpc":"2.0","id":`+id+`,"error":{"code":-32601,"message":"method not found"}}`)
		}
	}
}

func writeJSON(c net.Conn, status int, session, body string) {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	if session != "" {
		b.WriteString("Mcp-Session-Id: " + session + "\r\n")
	}
	if body != "" {
		b.WriteString("Content-Type: application/json\r\n")
	}
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	io.WriteString(c, b.String())
}

func chunk(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }

func writeFramed(c net.Conn, callID string) {
	sampling := "data: " + `{"jsonrpc":"2.0","id":"framing-sampling-1","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"hello"}}],"maxTokens":16}}` + "\n\n"
	result := "data: " + `{"jsonrpc":"2.0","id":` + callID + `,"result":{"content":[{"type":"text","text":"framed result"}]}}` + "\n\n"
	io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
		chunk(sampling[:2])+chunk(sampling[2:])+chunk(result)+"0\r\n\r\n")
}
