package engine

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"mcpintercept/exchange"
	"mcpintercept/tlsmitm"
)

// level2Post is how Level 2 answers a server on the client's behalf (a server→client request
// that policy blocked on a 2025-x stream: a dropped request would leave the server waiting): one
// HTTP/1.1 request over a new upstream connection to the flow's original destination, dialled
// like the flow's own (bypass mark, connect timeout), TLS re-originated and verified when the
// flow is terminated. The headers come from Level 2 (the client's session headers, Authorization
// among them); nothing here logs them.
func (e *Engine) level2Post(f *flow, route *Route, tlsMode Disposition) func(context.Context, string, []exchange.Header, []byte) error {
	return func(ctx context.Context, target string, headers []exchange.Header, body []byte) error {
		dctx, cancel := context.WithTimeout(f.dialContext(ctx), e.opt.Limits.ConnectTimeout)
		c, err := f.dialer().DialContext(dctx, "tcp", f.orig.String())
		cancel()
		if err != nil {
			return fmt.Errorf("dial: %s", dialReason(err))
		}
		defer c.Close()
		var conn net.Conn = c
		if tlsMode == Terminate && !route.PlaintextUpstreamTrustedNetwork {
			upCfg := e.opt.TLS.Upstream
			if f.src != nil && f.src.UpstreamRoots != nil {
				upCfg.Roots = f.src.UpstreamRoots
			}
			tc, err := tlsmitm.Originate(ctx, c, f.sniName, f.orig.Addr(), upCfg)
			if err != nil {
				return fmt.Errorf("tls: %w", err)
			}
			defer tc.Close()
			conn = tc
		}
		if dl, ok := ctx.Deadline(); ok {
			conn.SetDeadline(dl)
		}
		var b bytes.Buffer
		b.Grow(len(body) + 512)
		fmt.Fprintf(&b, "POST %s HTTP/1.1\r\n", target)
		for _, h := range headers {
			switch strings.ToLower(h.Name) {
			case "content-length", "transfer-encoding", "connection":
				continue
			}
			if strings.ContainsAny(h.Name+h.Value, "\r\n") {
				continue
			}
			fmt.Fprintf(&b, "%s: %s\r\n", h.Name, h.Value)
		}
		fmt.Fprintf(&b, "Content-Length: %d\r\nConnection: close\r\n\r\n", len(body))
		b.Write(body)
		if _, err := conn.Write(b.Bytes()); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return fmt.Errorf("read response: %w", err)
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("the server answered HTTP %d", resp.StatusCode)
		}
		return nil
	}
}
