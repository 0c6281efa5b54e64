// Command chatty is a Go SDK MCP server and client for the end-to-end test of what a call sends
// on its own stream (e2e/level2_content_test.go). `chatty serve` serves one tool, chatty, that
// while it runs sends the client a log message (notifications/message), a progress notification
// and, when the client can sample, a sampling/createMessage request, each carrying the call's
// canary argument, and then returns a result carrying it too. `chatty call` calls it as a Go SDK
// client that sets a log level, asks for progress and answers sampling, and prints as JSON what
// each handler received and the result's text.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: chatty serve -listen ADDR | chatty call -url URL -canary C")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "call":
		err = call(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatty:", err)
		os.Exit(1)
	}
}

type chattyArgs struct {
	Canary string `json:"canary"`
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", "", "address to listen on")
	fs.Parse(args)
	s := mcp.NewServer(&mcp.Implementation{Name: "chatty", Version: "1.0.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "chatty", Description: "Logs, reports progress and samples with the canary, then returns it."},
		func(ctx context.Context, req *mcp.CallToolRequest, in chattyArgs) (*mcp.CallToolResult, any, error) {
			ss := req.Session
			if err := ss.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "chatty", Data: "log " + in.Canary}); err != nil {
				return nil, nil, fmt.Errorf("log: %w", err)
			}
			if tok := req.Params.GetProgressToken(); tok != nil {
				if err := ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: 1, Total: 2,
					Message: "progress " + in.Canary}); err != nil {
					return nil, nil, fmt.Errorf("progress: %w", err)
				}
			}
			sampled := ""
			if p := ss.InitializeParams(); p != nil && p.Capabilities != nil && p.Capabilities.Sampling != nil {
				res, err := ss.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 10,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "sampling " + in.Canary}}}})
				if err != nil {
					return nil, nil, fmt.Errorf("sampling: %w", err)
				}
				if t, ok := res.Content.(*mcp.TextContent); ok {
					sampled = " sampled " + t.Text
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done " + in.Canary + sampled}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Println("READY")
	return srv.ListenAndServe()
}

// report is what `chatty call` prints.
type report struct {
	Logs     []string `json:"logs"`
	Progress []string `json:"progress"`
	Sampling []string `json:"sampling"`
	Result   string   `json:"result"`
}

func call(args []string) error {
	fs := flag.NewFlagSet("call", flag.ExitOnError)
	url := fs.String("url", "", "MCP endpoint")
	canary := fs.String("canary", "", "the secret the tool sends back")
	fs.Parse(args)

	var mu sync.Mutex
	var rep report
	note := func(list *[]string, s string) {
		mu.Lock()
		*list = append(*list, s)
		mu.Unlock()
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "lab-agent", Version: "1.0.0"}, &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			b, _ := json.Marshal(r.Params.Data)
			note(&rep.Logs, string(b))
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			note(&rep.Progress, r.Params.Message)
		},
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			for _, m := range r.Params.Messages {
				if t, ok := m.Content.(*mcp.TextContent); ok {
					note(&rep.Sampling, t.Text)
				}
			}
			return &mcp.CreateMessageResult{Role: "assistant", Model: "lab", Content: &mcp.TextContent{Text: "ok"}}, nil
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: *url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer cs.Close()
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		return fmt.Errorf("set logging level: %w", err)
	}
	params := &mcp.CallToolParams{Name: "chatty", Arguments: map[string]any{"canary": *canary}}
	params.SetProgressToken("chatty-progress")
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		return fmt.Errorf("call: %w", err)
	}
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			rep.Result += t.Text
		}
	}
	// Notifications are handled on goroutines of their own: wait (bounded) until the log and
	// progress handlers ran, since both were sent before the result.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		done := len(rep.Logs) > 0 && len(rep.Progress) > 0
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the log or progress notification never arrived")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return json.NewEncoder(os.Stdout).Encode(rep)
}
