package cniproto

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// DefaultReadTimeout is how long Serve waits for a client's whole request line.
const DefaultReadTimeout = 10 * time.Second

// writeTimeout bounds writing the response to a client that does not read.
const writeTimeout = 10 * time.Second

// ErrUnreachable wraps every Send failure before the request reached the agent (no socket,
// connection refused, dial timeout), so that the plugin can tell "agent down" from a broken
// exchange.
var ErrUnreachable = errors.New("agent unreachable")

// Handler answers one request. ctx is Serve's: it is done when the agent stops.
type Handler func(ctx context.Context, req Request) Response

// ServeOption adjusts Serve.
type ServeOption func(*serveOptions)

type serveOptions struct {
	readTimeout time.Duration
	maxConns    int
}

// WithReadTimeout sets how long a client has to send its request line (default
// DefaultReadTimeout): one deadline for the whole read, so a slow sender cannot extend it.
func WithReadTimeout(d time.Duration) ServeOption {
	return func(o *serveOptions) {
		if d > 0 {
			o.readTimeout = d
		}
	}
}

// WithMaxConns sets how many connections are handled at once (default MaxConns).
func WithMaxConns(n int) ServeOption {
	return func(o *serveOptions) {
		if n > 0 {
			o.maxConns = n
		}
	}
}

// Serve accepts on ln until ctx is done or ln is closed, and returns nil then (another accept
// error is returned). At most MaxConns connections are handled at once: the rest wait in the
// listen backlog, not accepted, so a flood costs no goroutine. Each request is read within one
// deadline and MaxMessageBytes, decoded strictly and validated; an invalid one is answered
// {ok:false,error} without calling h. Serve closes ln and waits for its connections before
// returning.
func Serve(ctx context.Context, ln net.Listener, h Handler, log *slog.Logger, opts ...ServeOption) error {
	o := serveOptions{readTimeout: DefaultReadTimeout, maxConns: MaxConns}
	for _, opt := range opts {
		opt(&o)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, o.maxConns)
	var backoff time.Duration
	for {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		c, err := ln.Accept()
		if err != nil {
			<-sem
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// EMFILE and the like: wait and retry, as net/http does, rather than spin or stop.
			var ne net.Error
			if errors.As(err, &ne) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				log.Warn("cni socket: accept", "err", err, "retry_in", backoff)
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return nil
				}
				continue
			}
			return fmt.Errorf("cni socket: accept: %w", err)
		}
		backoff = 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			serveConn(ctx, c, h, log, o.readTimeout)
		}()
	}
}

func serveConn(ctx context.Context, c net.Conn, h Handler, log *slog.Logger, readTimeout time.Duration) {
	defer c.Close()
	// The agent stopping ends a connection stuck in the read or write.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.SetReadDeadline(time.Now().Add(readTimeout))

	var resp Response
	line, err := readLine(c)
	if err == nil {
		var req Request
		if req, err = DecodeRequest(line); err == nil {
			resp = h(ctx, req)
			if len(resp.Error) > maxError {
				resp.Error = resp.Error[:maxError]
			}
			log.Debug("cni request", "command", req.Command, "pod", req.Pod.Namespace+"/"+req.Pod.Name, "ok", resp.OK, "enrolled", resp.Enrolled)
		}
	}
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, errEmpty) {
			level = slog.LevelDebug
		}
		log.Log(ctx, level, "cni socket: bad request", "err", err)
		resp = Response{OK: false, Error: err.Error()}
	}
	b, merr := encodeLine(resp)
	if merr != nil {
		return
	}
	c.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.Write(b); err != nil {
		log.Debug("cni socket: write response", "err", err)
	}
}

// errEmpty is a connection closed without a byte: a liveness probe (the plugin's STATUS), not
// worth a warning.
var errEmpty = errors.New("connection closed before a message")

// readLine reads one newline-terminated line of at most MaxMessageBytes (newline included).
func readLine(r io.Reader) ([]byte, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, MaxMessageBytes+1), 4096)
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxMessageBytes {
			return nil, fmt.Errorf("message larger than %d bytes", MaxMessageBytes)
		}
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(line) == 0 {
				return nil, errEmpty
			}
			return nil, errors.New("truncated message (no newline)")
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, errors.New("timed out reading the message")
		default:
			return nil, fmt.Errorf("read: %w", err)
		}
	}
}

// Send dials socket, writes req and reads the response, all within ctx (its deadline and its
// cancellation). A failure to connect wraps ErrUnreachable.
func Send(ctx context.Context, socket string, req Request) (Response, error) {
	if req.Version == 0 {
		req.Version = Version
	}
	if err := req.Validate(); err != nil {
		return Response{}, fmt.Errorf("invalid request: %w", err)
	}
	b, err := encodeLine(req)
	if err != nil {
		return Response{}, fmt.Errorf("encode request: %w", err)
	}
	if len(b) > MaxMessageBytes {
		return Response{}, fmt.Errorf("request larger than %d bytes", MaxMessageBytes)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return Response{}, fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	defer c.Close()
	// Only the context ends the exchange (no deadline of the connection's own racing it), so
	// that a timeout is always reported as ctx's.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(b); err != nil {
		return Response{}, fmt.Errorf("send request: %w", ctxErr(ctx, err))
	}
	line, err := readLine(c)
	if err != nil {
		return Response{}, fmt.Errorf("read response: %w", ctxErr(ctx, err))
	}
	var resp Response
	// Lenient on purpose: a newer agent may add fields an older plugin on the node does not know.
	if err := json.Unmarshal(line, &resp); err != nil {
		return Response{}, fmt.Errorf("decode response: %w", err)
	}
	if !resp.OK && resp.Error == "" {
		resp.Error = "the agent refused the request without a reason"
	}
	return resp, nil
}

// ctxErr names the context's end when it is what broke the exchange.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// Listen creates the agent's socket at path: a stale socket there is removed (never another kind
// of file, and never a socket a live agent still answers on), the parent directory is created
// 0755, and the socket is made 0600 so that only root (the runtime running the plugin) connects.
func Listen(path string) (*net.UnixListener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("cni socket %q: not an absolute path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("cni socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("cni socket %s: exists and is not a socket (%s); not removing it", path, fi.Mode().Type())
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("cni socket %s: another process is listening on it", path)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cni socket: remove stale socket: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("cni socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("cni socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("cni socket: %w", err)
	}
	return ln, nil
}
