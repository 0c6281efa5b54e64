package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// addExtraTools registers n more tools, so that a list holds more than one page (-page-size):
// the odd ones are named denied_extra_NN (targets for the lab's deny rule), the even ones
// extra_NN. Each echoes its name.
func addExtraTools(s *mcp.Server, n int) {
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("extra_%02d", i)
		if i%2 == 1 {
			name = "denied_" + name
		}
		s.AddTool(&mcp.Tool{Name: name, Description: "An extra tool (-extra-tools); returns its name.",
			InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return textResult(name), nil
			})
	}
}

// Multi round-trip tools (-input-required). The first call of ask_model (ask_user) returns an
// input_required result with one sampling (elicitation) input request and a requestState that
// this process signs; the retry must carry the answer under the same key and the state exactly as
// sent, and gets the final result. The tools ask whatever capabilities the client declared (a
// test can then see what an intermediary does with a request the client did not declare), and
// log on stderr, one line per round, whether the client declared the capability:
//
//	MRTR ask_model round=1 declared=true
//	MRTR ask_model round=2 declared=true state=ok
//
// A retry with a missing or altered requestState or without the answer is a tool error.

const (
	askModelKey = "draft"
	askUserKey  = "who"
)

type askArgs struct {
	Prompt string `json:"prompt"`
}

func addInputRequiredTools(s *mcp.Server) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	schema := json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string"}}}`)
	s.AddTool(&mcp.Tool{Name: "ask_model", Description: "Asks the client's model (sampling, as an input_required result) and returns its answer.", InputSchema: schema},
		mrtrHandler(key, "ask_model", askModelKey,
			func(c *mcp.ClientCapabilities) bool { return c != nil && c.Sampling != nil },
			func(prompt string) mcp.InputRequest {
				return &mcp.CreateMessageParams{MaxTokens: 20,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: prompt}}}}
			},
			func(resp mcp.InputResponse) (string, error) {
				switch r := resp.(type) {
				case *mcp.CreateMessageWithToolsResult:
					var parts []string
					for _, c := range r.Content {
						if t, ok := c.(*mcp.TextContent); ok {
							parts = append(parts, t.Text)
						}
					}
					return "model " + r.Model + " says: " + strings.Join(parts, ""), nil
				case *mcp.CreateMessageResult:
					t, _ := r.Content.(*mcp.TextContent)
					if t == nil {
						return "", errors.New("the sampling answer has no text")
					}
					return "model " + r.Model + " says: " + t.Text, nil
				}
				return "", fmt.Errorf("the answer is a %T, not a sampling result", resp)
			}))
	s.AddTool(&mcp.Tool{Name: "ask_user", Description: "Asks the user for a name (elicitation, as an input_required result) and greets them.", InputSchema: schema},
		mrtrHandler(key, "ask_user", askUserKey,
			func(c *mcp.ClientCapabilities) bool { return c != nil && c.Elicitation != nil },
			func(prompt string) mcp.InputRequest {
				return &mcp.ElicitParams{Mode: "form", Message: prompt,
					RequestedSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)}
			},
			func(resp mcp.InputResponse) (string, error) {
				r, ok := resp.(*mcp.ElicitResult)
				if !ok {
					return "", fmt.Errorf("the answer is a %T, not an elicitation result", resp)
				}
				if r.Action != "accept" {
					return "the user chose " + r.Action, nil
				}
				return fmt.Sprintf("hello %v", r.Content["name"]), nil
			}))
	return nil
}

func mrtrHandler(key []byte, tool, irKey string, declared func(*mcp.ClientCapabilities) bool,
	ask func(prompt string) mcp.InputRequest, answer func(mcp.InputResponse) (string, error)) mcp.ToolHandler {
	sign := func(payload string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(payload))
		return payload + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	return func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in askArgs
		if len(req.Params.Arguments) > 0 {
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, fmt.Errorf("arguments: %w", err)
			}
		}
		if in.Prompt == "" {
			in.Prompt = "say hi"
		}
		decl := declared(req.ClientCapabilities())
		if req.Params.RequestState == "" && req.Params.InputResponses == nil {
			fmt.Fprintf(os.Stderr, "MRTR %s round=1 declared=%t\n", tool, decl)
			nonce := make([]byte, 9)
			rand.Read(nonce)
			state := sign(tool + ":" + base64.RawURLEncoding.EncodeToString(nonce) + ":" + base64.RawURLEncoding.EncodeToString([]byte(in.Prompt)))
			return &mcp.CallToolResult{
				InputRequests: mcp.InputRequestMap{irKey: ask(in.Prompt)},
				RequestState:  state,
			}, nil
		}
		stateOK := false
		if payload, _, ok := cutLast(req.Params.RequestState, "."); ok {
			stateOK = hmac.Equal([]byte(sign(payload)), []byte(req.Params.RequestState)) && strings.HasPrefix(payload, tool+":")
		}
		fmt.Fprintf(os.Stderr, "MRTR %s round=2 declared=%t state=%s\n", tool, decl, map[bool]string{true: "ok", false: "bad"}[stateOK])
		if !stateOK {
			return errorResult("requestState missing or altered"), nil
		}
		resp, ok := req.Params.InputResponses[irKey]
		if !ok {
			return errorResult("the retry carries no answer for input request " + irKey), nil
		}
		text, err := answer(resp)
		if err != nil {
			return errorResult(err.Error()), nil
		}
		return textResult(text + " (requestState intact)"), nil
	}
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func errorResult(msg string) *mcp.CallToolResult {
	r := textResult(msg)
	r.IsError = true
	return r
}
