package cniproto

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// generous bounds a wait that only a stuck test reaches.
const generous = 60 * time.Second

func validAdd() Request {
	return Request{
		Version: Version, Command: CmdAdd, ContainerID: "0123abcd", Netns: "/var/run/netns/cni-1234",
		IfName: "eth0", Pod: PodRef{Namespace: "default", Name: "client-0", UID: "5d0c1f5e-1b3a-4c1e-9a55-3f1f0c2b7d11"},
		IPs: []string{"10.22.0.5/16", "fd00:22::5/64"},
	}
}

// serve runs Serve on a fresh socket and returns its path; the server stops with the test.
func serve(t *testing.T, h Handler, opts ...ServeOption) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "run", "cni.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, nil, opts...) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(generous):
			t.Error("Serve did not return after cancel")
		}
	})
	return path
}

func TestRoundTrip(t *testing.T) {
	del := validAdd()
	del.Command, del.Netns, del.IPs, del.IfName = CmdDel, "", nil, ""
	check := validAdd()
	check.Command = CmdCheck
	noUID := validAdd()
	noUID.Pod.UID = ""
	tests := []struct {
		name string
		req  Request
		resp Response
	}{
		{"add enrolled", validAdd(), Response{OK: true, Enrolled: true}},
		{"add not selected", noUID, Response{OK: true}},
		{"del without netns", del, Response{OK: true}},
		{"check refused", check, Response{OK: false, Error: "pod default/client-0 is not enrolled"}},
	}
	var got atomic.Pointer[Request]
	var answer atomic.Pointer[Response]
	path := serve(t, func(_ context.Context, req Request) Response {
		got.Store(&req)
		return *answer.Load()
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer.Store(&tt.resp)
			ctx, cancel := context.WithTimeout(context.Background(), generous)
			defer cancel()
			resp, err := Send(ctx, path, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if resp != tt.resp {
				t.Errorf("response %+v, want %+v", resp, tt.resp)
			}
			if g := got.Load(); g == nil || !reflect.DeepEqual(*g, tt.req) {
				t.Errorf("handler got %+v, want %+v", g, tt.req)
			}
		})
	}
}

// exchange writes raw to the server, half-closes when asked, and decodes the response line.
func exchange(t *testing.T, path string, raw []byte, closeWrite bool) Response {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(generous))
	// The server may answer (and close) before reading everything of an oversized request.
	go func() {
		c.Write(raw)
		if closeWrite {
			c.(*net.UnixConn).CloseWrite()
		}
	}()
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		t.Fatalf("read response: %v (%q)", err, line)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		t.Fatalf("response %q: %v", line, err)
	}
	return resp
}

func TestServeRefuses(t *testing.T) {
	good, _ := json.Marshal(validAdd())
	with := func(edit func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(good, &m)
		edit(m)
		b, _ := json.Marshal(m)
		return append(b, '\n')
	}
	tests := []struct {
		name       string
		raw        []byte
		closeWrite bool
		want       string
	}{
		{"oversized without newline", []byte(strings.Repeat("a", MaxMessageBytes+100)), false, "larger than"},
		{"oversized with newline", append([]byte(`{"version":1,"command":"ADD","netns":"/`+strings.Repeat("x", MaxMessageBytes)+`"}`), '\n'), false, "larger than"},
		{"truncated", good[:len(good)/2], true, "truncated"},
		{"empty", nil, true, "closed before"},
		{"malformed", []byte("{\"version\":1,\n"), false, "decode request"},
		{"not an object", []byte("[1,2]\n"), false, "decode request"},
		{"trailing data", append(append([]byte{}, good...), []byte(" {}\n")...), false, "trailing data"},
		{"unknown field", with(func(m map[string]any) { m["privileged"] = true }), false, `unknown field "privileged"`},
		{"unknown pod field", with(func(m map[string]any) { m["pod"].(map[string]any)["labels"] = "x" }), false, `unknown field "labels"`},
		{"wrong version", with(func(m map[string]any) { m["version"] = 2 }), false, "unsupported protocol version 2"},
		{"no version", with(func(m map[string]any) { delete(m, "version") }), false, "unsupported protocol version 0"},
		{"unknown command", with(func(m map[string]any) { m["command"] = "GC" }), false, `unknown command "GC"`},
		{"relative netns", with(func(m map[string]any) { m["netns"] = "netns/x" }), false, "not an absolute path"},
		{"no namespace", with(func(m map[string]any) { m["pod"].(map[string]any)["namespace"] = "" }), false, "pod.namespace is empty"},
		{"bad ip", with(func(m map[string]any) { m["ips"] = []string{"10.0.0.1"} }), false, "CIDR form"},
	}
	var calls atomic.Int64
	path := serve(t, func(context.Context, Request) Response {
		calls.Add(1)
		return Response{OK: true}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := exchange(t, path, tt.raw, tt.closeWrite)
			if resp.OK || !strings.Contains(resp.Error, tt.want) {
				t.Errorf("response %+v, want ok=false and an error with %q", resp, tt.want)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler called %d times for invalid requests", n)
	}
	// The server still works after all that.
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if resp, err := Send(ctx, path, validAdd()); err != nil || !resp.OK {
		t.Errorf("valid request after the invalid ones: %+v, %v", resp, err)
	}
}

func TestSlowClient(t *testing.T) {
	called := make(chan struct{}, 1)
	path := serve(t, func(context.Context, Request) Response {
		called <- struct{}{}
		return Response{OK: true}
	}, WithReadTimeout(50*time.Millisecond))
	for _, tt := range []struct {
		name string
		raw  string
	}{
		{"silent", ""},
		{"no newline", `{"version":1,"command":"ADD"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := exchange(t, path, []byte(tt.raw), false)
			if resp.OK || !strings.Contains(resp.Error, "timed out") {
				t.Errorf("response %+v, want a read timeout", resp)
			}
		})
	}
	select {
	case <-called:
		t.Error("handler called for a client that never finished its request")
	default:
	}
}

func TestFlood(t *testing.T) {
	t.Run("handlers bounded, the rest queued", func(t *testing.T) {
		const clients = MaxConns + 36
		var inflight, peak atomic.Int64
		release := make(chan struct{})
		path := serve(t, func(ctx context.Context, _ Request) Response {
			n := inflight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			inflight.Add(-1)
			return Response{OK: true}
		})
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for range clients {
			wg.Go(func() {
				if resp, err := Send(ctx, path, validAdd()); err != nil || !resp.OK {
					errs <- errors.Join(err, errors.New(resp.Error))
				}
			})
		}
		waitFor(t, func() bool { return inflight.Load() >= MaxConns })
		if p := peak.Load(); p > MaxConns {
			t.Errorf("%d handlers at once, want at most %d", p, MaxConns)
		}
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("queued client: %v", err)
		}
		if p := peak.Load(); p > MaxConns {
			t.Errorf("%d handlers at once, want at most %d", p, MaxConns)
		}
	})
	t.Run("silent connections time out and free their slots", func(t *testing.T) {
		path := serve(t, func(context.Context, Request) Response { return Response{OK: true} },
			WithReadTimeout(100*time.Millisecond))
		var conns []net.Conn
		for range MaxConns + 36 {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), generous)
		defer cancel()
		if resp, err := Send(ctx, path, validAdd()); err != nil || !resp.OK {
			t.Errorf("request behind %d silent connections: %+v, %v", len(conns), resp, err)
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(generous)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServeStopsWithOpenConnection(t *testing.T) {
	ln, err := Listen(filepath.Join(t.TempDir(), "cni.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ln, func(context.Context, Request) Response { return Response{OK: true} }, nil, WithReadTimeout(time.Hour))
	}()
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Make sure the connection is being served (it has an answer coming) before stopping.
	c.Write([]byte(`{"version":1`))
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(generous):
		t.Fatal("Serve did not return with a connection open")
	}
}

func TestSendUnreachable(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	tests := []struct {
		name, socket string
	}{
		{"no socket", filepath.Join(dir, "missing.sock")},
		{"refused", stale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), generous)
			defer cancel()
			_, err := Send(ctx, tt.socket, validAdd())
			if !errors.Is(err, ErrUnreachable) {
				t.Errorf("err %v, want ErrUnreachable", err)
			}
		})
	}
	t.Run("hung agent", func(t *testing.T) {
		l, err := net.Listen("unix", filepath.Join(dir, "hung.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		hold := make(chan struct{})
		defer close(hold)
		go func() {
			c, err := l.Accept()
			if err == nil {
				defer c.Close()
				<-hold // reads nothing, never answers
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err = Send(ctx, l.Addr().String(), validAdd())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v, want the deadline", err)
		}
	})
}

func TestListen(t *testing.T) {
	t.Run("creates the directory and a 0600 socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "a", "b", "cni.sock")
		ln, err := Listen(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Errorf("socket mode %v, want a socket 0600", fi.Mode())
		}
		if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o755 {
			t.Errorf("directory mode %v, want 0755", di.Mode().Perm())
		}
	})
	t.Run("replaces a stale socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cni.sock")
		old, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		old.(*net.UnixListener).SetUnlinkOnClose(false)
		old.Close()
		ln, err := Listen(path)
		if err != nil {
			t.Fatalf("stale socket: %v", err)
		}
		ln.Close()
	})
	t.Run("refuses a live socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cni.sock")
		live, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()
		if ln, err := Listen(path); err == nil || !strings.Contains(err.Error(), "another process") {
			if ln != nil {
				ln.Close()
			}
			t.Errorf("err %v, want another process listening", err)
		}
	})
	for _, tt := range []struct {
		name string
		make func(path string) error
	}{
		{"refuses a regular file", func(p string) error { return os.WriteFile(p, []byte("keep"), 0o600) }},
		{"refuses a directory", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"refuses a symlink", func(p string) error { return os.Symlink("/etc/hostname", p) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cni.sock")
			if err := tt.make(path); err != nil {
				t.Fatal(err)
			}
			if ln, err := Listen(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
				if ln != nil {
					ln.Close()
				}
				t.Errorf("err %v, want not a socket", err)
			}
			if _, err := os.Lstat(path); err != nil {
				t.Errorf("the file was removed: %v", err)
			}
		})
	}
	t.Run("relative path", func(t *testing.T) {
		if _, err := Listen("cni.sock"); err == nil {
			t.Error("relative path accepted")
		}
	})
}
