package federation

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"mcpintercept/mcp"
)

// Limits bound one downstream's catalog.
type Limits struct {
	Pages int
	Tools int
	Bytes int64
}

// clientName is how the federation names itself to downstreams.
const clientName = "mcpintercept-federation"

// legacyVersions are the versions a downstream without server/discover may settle on, newest first.
var legacyVersions = []string{string(mcp.V20251125), string(mcp.V20250618), string(mcp.V20250326)}

// budget is what is left of a refresh's byte limit.
type budget struct{ left int64 }

func (b *budget) take(n int) error {
	b.left -= int64(n)
	if b.left < 0 {
		return errors.New("catalog over the byte limit (limits.bytes)")
	}
	return nil
}

// meta2026 is the _meta a 2026-07-28 request carries: the version, the client's info and
// capabilities (the federation's own: it is the downstream's client).
func meta2026(extra map[string]any) map[string]any {
	m := map[string]any{
		mcp.MetaProtocolVersion:    string(mcp.V20260728),
		mcp.MetaClientInfo:         map[string]any{"name": clientName, "version": Version},
		mcp.MetaClientCapabilities: map[string]any{},
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// Refresh reads d's catalog: server/discover and tools/list (2026-07-28), or, for a server that
// has no server/discover, initialize, notifications/initialized and tools/list in a session it
// then deletes. Every response counts against lim.Bytes; more than lim.Pages pages or
// lim.Tools tools is a failure (no partial catalog).
func (d *Downstream) Refresh(ctx context.Context, lim Limits) (*Catalog, error) {
	ctx, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	b := &budget{left: lim.Bytes}
	version, err := d.discover(ctx, b)
	if err != nil {
		return nil, err
	}
	session := ""
	if version != string(mcp.V20260728) {
		if version, session, err = d.initialize(ctx, b); err != nil {
			return nil, err
		}
		defer func() {
			if session != "" {
				_ = d.deleteSession(ctx, session, version)
			}
		}()
	}
	c := &Catalog{Downstream: d.ID, Version: version}
	seen := map[string]bool{}
	cursor := ""
	for page := 1; ; page++ {
		if page > lim.Pages {
			return nil, fmt.Errorf("tools/list has more than %d pages (limits.pages)", lim.Pages)
		}
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		if version == string(mcp.V20260728) {
			params["_meta"] = meta2026(nil)
		}
		id := strconv.Itoa(page + 1)
		resp, err := d.post(ctx, rpcRequest{version: version, method: mcp.MethodToolsList, session: session,
			body: requestBody(id, mcp.MethodToolsList, params)}, id, b.left)
		if resp != nil {
			if berr := b.take(resp.n); berr != nil {
				return nil, berr
			}
		}
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		if resp.msg.Kind == mcp.KindError {
			return nil, fmt.Errorf("tools/list: error %d: %s", resp.msg.Error.Code, clip(resp.msg.Error.Message))
		}
		res := resp.msg.Result
		if err := c.addPage(res, seen, lim.Tools); err != nil {
			return nil, err
		}
		next, ok := mcp.StringMember(res, "nextCursor")
		if !ok || next == "" {
			break
		}
		cursor = next
	}
	c.Bytes = int(lim.Bytes - b.left)
	return c, nil
}

// addPage adds the tools of one tools/list result to c: every entry an object with a valid,
// unique name; more than maxTools in all fails.
func (c *Catalog) addPage(res []byte, seen map[string]bool, maxTools int) error {
	tools, ok := mcp.Member(res, "tools")
	if !ok || len(tools) == 0 || tools[0] != '[' {
		return errors.New("tools/list: result has no tools array")
	}
	for _, span := range mcp.Elements(tools) {
		def := tools[span[0]:span[1]]
		if !mcp.IsObject(def) {
			return fmt.Errorf("tools/list: tool %d is not an object", len(c.Tools))
		}
		name, ok := mcp.StringMember(def, "name")
		if !ok {
			return fmt.Errorf("tools/list: tool %d has no name", len(c.Tools))
		}
		if err := checkToolName(name); err != nil {
			return fmt.Errorf("tools/list: tool %s: %w", clip(name), err)
		}
		if seen[name] {
			return fmt.Errorf("tools/list: tool %s listed twice (collision)", clip(name))
		}
		seen[name] = true
		c.Tools = append(c.Tools, CatalogTool{Name: name, Def: slices.Clone(def)})
		if len(c.Tools) > maxTools {
			return fmt.Errorf("more than %d tools (limits.tools)", maxTools)
		}
	}
	return nil
}

// checkToolName refuses a name a client could not send back exactly: empty, over 128 bytes, or
// holding a control character.
func checkToolName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("name must be 1 to 128 bytes, got %d", len(name))
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return errors.New("name holds a control character or invalid UTF-8")
		}
	}
	return nil
}

// discover asks server/discover; 2026-07-28 when the server supports it, else the version the
// legacy handshake must find ("").
func (d *Downstream) discover(ctx context.Context, b *budget) (string, error) {
	body := requestBody("1", mcp.MethodServerDiscover, map[string]any{"_meta": meta2026(nil)})
	resp, err := d.post(ctx, rpcRequest{version: string(mcp.V20260728), method: mcp.MethodServerDiscover, body: body}, "1", b.left)
	if resp != nil {
		if berr := b.take(resp.n); berr != nil {
			return "", berr
		}
	}
	var ue *uncertainError
	switch {
	case err == nil && resp.msg.Kind == mcp.KindResponse:
		vs, ok := mcp.Member(resp.msg.Result, "supportedVersions")
		if !ok {
			return string(mcp.V20260728), nil
		}
		for _, sp := range mcp.Elements(vs) {
			if mcp.Unquote(vs[sp[0]:sp[1]]) == string(mcp.V20260728) {
				return string(mcp.V20260728), nil
			}
		}
		return "", nil
	case err == nil:
		return "", nil // an error answer: no server/discover here
	case errors.As(err, &ue) && (ue.reason == "http" || ue.reason == "malformed"):
		return "", nil // an older server refuses the request its own way
	}
	return "", fmt.Errorf("server/discover: %w", err)
}

// initialize runs the 2025 handshake: initialize, then notifications/initialized.
func (d *Downstream) initialize(ctx context.Context, b *budget) (version, session string, err error) {
	body := requestBody("1", mcp.MethodInitialize, map[string]any{
		"protocolVersion": legacyVersions[0],
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": clientName, "version": Version},
	})
	resp, err := d.post(ctx, rpcRequest{method: mcp.MethodInitialize, body: body}, "1", b.left)
	if resp != nil {
		if berr := b.take(resp.n); berr != nil {
			return "", "", berr
		}
	}
	if err != nil {
		return "", "", fmt.Errorf("initialize: %w", err)
	}
	if resp.msg.Kind == mcp.KindError {
		return "", "", fmt.Errorf("initialize: error %d: %s", resp.msg.Error.Code, clip(resp.msg.Error.Message))
	}
	v, _ := mcp.StringMember(resp.msg.Result, "protocolVersion")
	if !slices.Contains(legacyVersions, v) {
		if resp.session != "" {
			_ = d.deleteSession(ctx, resp.session, "")
		}
		return "", "", fmt.Errorf("initialize: server chose protocol version %s, which the federation does not speak", clip(v))
	}
	session = resp.session
	if _, err := d.post(ctx, rpcRequest{version: v, method: "notifications/initialized", session: session, notify: true,
		body: requestBody("", "notifications/initialized", nil)}, "", b.left); err != nil {
		if session != "" {
			_ = d.deleteSession(ctx, session, v)
		}
		return "", "", fmt.Errorf("notifications/initialized: %w", err)
	}
	return v, session, nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
