package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"mcpintercept/nodeagent/cniproto"
)

const generous = 60 * time.Second

// prev100 is what bridge + host-local print at 1.0.0 (the test compares the plugin's output to it).
const prev100 = `{"cniVersion":"1.0.0","interfaces":[{"name":"cni0","mac":"aa:bb:cc:dd:ee:01"},{"name":"veth1","mac":"aa:bb:cc:dd:ee:02"},{"name":"eth0","mac":"aa:bb:cc:dd:ee:03","sandbox":"/var/run/netns/pod-a"}],` +
	`"ips":[{"interface":2,"address":"10.22.0.5/16","gateway":"10.22.0.1"},{"interface":2,"address":"fd00:22::5/64","gateway":"fd00:22::1"}],` +
	`"routes":[{"dst":"0.0.0.0/0","gw":"10.22.0.1"}],"dns":{"nameservers":["10.96.0.10"],"search":["default.svc.cluster.local"]}}`

// prev040 is the same at 0.4.0 (ips carry a version).
const prev040 = `{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","mac":"aa:bb:cc:dd:ee:03","sandbox":"/var/run/netns/pod-a"}],` +
	`"ips":[{"version":"4","interface":0,"address":"10.22.0.5/16","gateway":"10.22.0.1"}],"dns":{}}`

const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=client-0;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=5d0c1f5e-1b3a-4c1e-9a55-3f1f0c2b7d11"

// agent is a fake node agent on a temp socket: it records what it is sent and answers resp.
type agent struct {
	socket string
	mu     sync.Mutex
	got    []cniproto.Request
	resp   cniproto.Response
}

func startAgent(t *testing.T, resp cniproto.Response) *agent {
	t.Helper()
	a := &agent{socket: filepath.Join(t.TempDir(), "cni.sock"), resp: resp}
	ln, err := cniproto.Listen(a.socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cniproto.Serve(ctx, ln, func(_ context.Context, req cniproto.Request) cniproto.Response {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.got = append(a.got, req)
			return a.resp
		}, nil)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(generous):
			t.Error("fake agent did not stop")
		}
	})
	return a
}

func (a *agent) requests() []cniproto.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]cniproto.Request(nil), a.got...)
}

func conf(t *testing.T, cniVersion, prev, socket, spool string, extra string) []byte {
	t.Helper()
	s := fmt.Sprintf(`{"cniVersion":%q,"name":"podnet","type":"mcpintercept-cni","socket":%q,"spool_dir":%q%s`, cniVersion, socket, spool, extra)
	if prev != "" {
		s += `,"prevResult":` + prev
	}
	return []byte(s + "}")
}

func cmdArgs(stdin []byte, args string) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: "abc123", Netns: "/var/run/netns/pod-a", IfName: "eth0", Args: args, StdinData: stdin}
}

func newPlugin() (*plugin, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return &plugin{stdout: &out, stderr: &errOut, send: cniproto.Send}, &out, &errOut
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%q: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func wantRequest(cmd string, ips ...string) cniproto.Request {
	r := cniproto.Request{
		Version: cniproto.Version, Command: cmd, ContainerID: "abc123", Netns: "/var/run/netns/pod-a", IfName: "eth0",
		Pod: cniproto.PodRef{Namespace: "default", Name: "client-0", UID: "5d0c1f5e-1b3a-4c1e-9a55-3f1f0c2b7d11"},
	}
	if len(ips) > 0 {
		r.IPs = ips
	}
	return r
}

func spooled(t *testing.T, dir string) []cniproto.Request {
	t.Helper()
	reqs, err := cniproto.ReadSpool(dir)
	if err != nil {
		t.Fatalf("ReadSpool: %v", err)
	}
	return reqs
}

func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func TestAdd(t *testing.T) {
	tests := []struct {
		name       string
		cniVersion string
		prev       string
		agentUp    bool
		agentResp  cniproto.Response
		extra      string // more plugin keys
		args       string
		wantErr    uint // CNI error code; 0 success (the prevResult printed)
		wantSent   []cniproto.Request
		wantSpool  bool
		wantStderr string
	}{
		{name: "enrolled 1.0.0", cniVersion: "1.0.0", prev: prev100, agentUp: true, agentResp: cniproto.Response{OK: true, Enrolled: true}, args: podArgs,
			wantSent: []cniproto.Request{wantRequest(cniproto.CmdAdd, "10.22.0.5/16", "fd00:22::5/64")}},
		{name: "enrolled 1.1.0", cniVersion: "1.1.0", prev: strings.Replace(prev100, `"1.0.0"`, `"1.1.0"`, 1), agentUp: true, agentResp: cniproto.Response{OK: true, Enrolled: true}, args: podArgs,
			wantSent: []cniproto.Request{wantRequest(cniproto.CmdAdd, "10.22.0.5/16", "fd00:22::5/64")}},
		{name: "enrolled 0.4.0", cniVersion: "0.4.0", prev: prev040, agentUp: true, agentResp: cniproto.Response{OK: true, Enrolled: true}, args: podArgs,
			wantSent: []cniproto.Request{wantRequest(cniproto.CmdAdd, "10.22.0.5/16")}},
		{name: "not selected", cniVersion: "1.0.0", prev: prev100, agentUp: true, agentResp: cniproto.Response{OK: true}, args: podArgs,
			wantSent: []cniproto.Request{wantRequest(cniproto.CmdAdd, "10.22.0.5/16", "fd00:22::5/64")}},
		{name: "agent down: spooled", cniVersion: "1.0.0", prev: prev100, args: podArgs,
			wantSpool: true, wantStderr: "spooled"},
		{name: "agent down, fail_closed: error", cniVersion: "1.0.0", prev: prev100, extra: `,"fail_closed":true`, args: podArgs,
			wantErr: types.ErrTryAgainLater},
		{name: "agent refuses", cniVersion: "1.0.0", prev: prev100, agentUp: true, agentResp: cniproto.Response{Error: "no netns"}, args: podArgs,
			wantSent: []cniproto.Request{wantRequest(cniproto.CmdAdd, "10.22.0.5/16", "fd00:22::5/64")}, wantStderr: "no netns"},
		{name: "agent refuses, fail_closed: error", cniVersion: "1.0.0", prev: prev100, agentUp: true, agentResp: cniproto.Response{Error: "no netns"}, extra: `,"fail_closed":true`, args: podArgs,
			wantErr:  types.ErrInternal,
			wantSent: []cniproto.Request{wantRequest(cniproto.CmdAdd, "10.22.0.5/16", "fd00:22::5/64")}},
		{name: "not a kubernetes pod", cniVersion: "1.0.0", prev: prev100, agentUp: true, agentResp: cniproto.Response{OK: true}, args: "IgnoreUnknown=1"},
		{name: "not a kubernetes pod, agent down, fail_closed", cniVersion: "1.0.0", prev: prev100, extra: `,"fail_closed":true`, args: ""},
		{name: "pod without uid", cniVersion: "1.0.0", prev: prev100, agentUp: true, agentResp: cniproto.Response{OK: true}, args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=client-0",
			wantSent: []cniproto.Request{func() cniproto.Request {
				r := wantRequest(cniproto.CmdAdd, "10.22.0.5/16", "fd00:22::5/64")
				r.Pod.UID = ""
				return r
			}()}},
		{name: "first in its chain: empty result", cniVersion: "1.0.0", agentUp: true, agentResp: cniproto.Response{OK: true}, args: podArgs,
			wantSent: []cniproto.Request{wantRequest(cniproto.CmdAdd)}},
		{name: "bad timeout", cniVersion: "1.0.0", prev: prev100, extra: `,"timeout":"soon"`, args: podArgs, wantErr: types.ErrInvalidNetworkConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spool := filepath.Join(t.TempDir(), "spool")
			socket := filepath.Join(t.TempDir(), "absent.sock")
			var a *agent
			if tt.agentUp {
				a = startAgent(t, tt.agentResp)
				socket = a.socket
			}
			p, out, errOut := newPlugin()
			err := p.add(cmdArgs(conf(t, tt.cniVersion, tt.prev, socket, spool, tt.extra), tt.args))
			if tt.wantErr != 0 {
				if cniCode(err) != tt.wantErr {
					t.Fatalf("err %v (code %d), want code %d", err, cniCode(err), tt.wantErr)
				}
				if out.Len() != 0 {
					t.Errorf("printed %q with an error", out)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				want := tt.prev
				if want == "" {
					want = fmt.Sprintf(`{"cniVersion":%q}`, tt.cniVersion)
				}
				if !sameJSON(t, out.Bytes(), []byte(want)) {
					t.Errorf("printed\n%s\nwant the prevResult unchanged\n%s", out, want)
				}
			}
			if a != nil {
				if got := a.requests(); !reflect.DeepEqual(got, tt.wantSent) {
					t.Errorf("agent got %+v, want %+v", got, tt.wantSent)
				}
			}
			got := spooled(t, spool)
			if tt.wantSpool {
				if want := []cniproto.Request{wantRequest(cniproto.CmdAdd, "10.22.0.5/16", "fd00:22::5/64")}; !reflect.DeepEqual(got, want) {
					t.Errorf("spool %+v, want %+v", got, want)
				}
			} else if len(got) != 0 {
				t.Errorf("spooled %+v", got)
			}
			if !strings.Contains(errOut.String(), tt.wantStderr) || strings.Count(errOut.String(), "\n") > 1 {
				t.Errorf("stderr %q, want one line with %q", errOut, tt.wantStderr)
			}
		})
	}
}

func TestAddHungAgentTimesOut(t *testing.T) {
	// An agent that accepts and never answers: the plugin's timeout ends the exchange.
	hold := make(chan struct{})
	defer close(hold)
	p, out, _ := newPlugin()
	p.send = func(ctx context.Context, _ string, _ cniproto.Request) (cniproto.Response, error) {
		select {
		case <-ctx.Done():
			return cniproto.Response{}, ctx.Err()
		case <-hold:
			return cniproto.Response{}, errors.New("test over")
		}
	}
	spool := filepath.Join(t.TempDir(), "spool")
	if err := p.add(cmdArgs(conf(t, "1.0.0", prev100, "/nonexistent.sock", spool, `,"timeout":"50ms"`), podArgs)); err != nil {
		t.Fatal(err)
	}
	if !sameJSON(t, out.Bytes(), []byte(prev100)) {
		t.Errorf("printed %s", out)
	}
	if got := spooled(t, spool); len(got) != 1 {
		t.Errorf("spool %+v, want the ADD", got)
	}
}

func TestDel(t *testing.T) {
	tests := []struct {
		name     string
		agentUp  bool
		resp     cniproto.Response
		stdin    func(socket, spool string) []byte
		args     string
		netns    string
		wantSent bool
		keepADD  bool // the spooled ADD survives (not this pod's container)
	}{
		{name: "agent up", agentUp: true, resp: cniproto.Response{OK: true}, args: podArgs, wantSent: true},
		{name: "agent up, refuses", agentUp: true, resp: cniproto.Response{Error: "unknown pod"}, args: podArgs, wantSent: true},
		{name: "agent down: spooled ADD removed", args: podArgs},
		{name: "agent down, fail_closed: still succeeds", args: podArgs, stdin: func(socket, spool string) []byte {
			return conf(t, "1.0.0", "", socket, spool, `,"fail_closed":true`)
		}},
		{name: "netns already gone", args: podArgs, netns: "-"},
		{name: "other sandbox's DEL keeps the new ADD", args: strings.Replace(podArgs, "abc123", "old999", 1), keepADD: true},
		{name: "not a kubernetes pod", agentUp: true, resp: cniproto.Response{OK: true}, args: "", keepADD: true},
		{name: "malformed configuration", args: podArgs, keepADD: true, stdin: func(string, string) []byte { return []byte("{") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spool := filepath.Join(t.TempDir(), "spool")
			socket := filepath.Join(t.TempDir(), "absent.sock")
			var a *agent
			if tt.agentUp {
				a = startAgent(t, tt.resp)
				socket = a.socket
			}
			pending := wantRequest(cniproto.CmdAdd)
			if err := cniproto.WriteSpool(spool, pending); err != nil {
				t.Fatal(err)
			}
			stdin := conf(t, "1.0.0", "", socket, spool, "")
			if tt.stdin != nil {
				stdin = tt.stdin(socket, spool)
			}
			args := cmdArgs(stdin, tt.args)
			if strings.Contains(tt.args, "old999") {
				args.ContainerID = "old999"
			}
			if tt.netns == "-" {
				args.Netns = ""
			}
			p, out, errOut := newPlugin()
			if err := p.del(args); err != nil {
				t.Fatalf("DEL failed: %v", err)
			}
			if out.Len() != 0 {
				t.Errorf("DEL printed %q", out)
			}
			if strings.Count(errOut.String(), "\n") > 1 {
				t.Errorf("stderr %q, want at most one line", errOut)
			}
			if a != nil {
				got := a.requests()
				if tt.wantSent {
					want := wantRequest(cniproto.CmdDel)
					if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
						t.Errorf("agent got %+v, want %+v", got, want)
					}
				} else if len(got) != 0 {
					t.Errorf("agent got %+v", got)
				}
			}
			left := spooled(t, spool)
			if tt.keepADD != (len(left) == 1) {
				t.Errorf("spool after DEL %+v, keep the ADD: %v", left, tt.keepADD)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		agentUp bool
		resp    cniproto.Response
		extra   string
		args    string
		wantErr uint
	}{
		{name: "enrolled", agentUp: true, resp: cniproto.Response{OK: true, Enrolled: true}, args: podArgs},
		{name: "agent down", args: podArgs},
		{name: "agent down, fail_closed", extra: `,"fail_closed":true`, args: podArgs, wantErr: types.ErrTryAgainLater},
		{name: "agent says no, fail_closed", agentUp: true, resp: cniproto.Response{Error: "rules missing"}, extra: `,"fail_closed":true`, args: podArgs, wantErr: types.ErrInternal},
		{name: "agent says no", agentUp: true, resp: cniproto.Response{Error: "rules missing"}, args: podArgs},
		{name: "not a kubernetes pod, fail_closed", extra: `,"fail_closed":true`, args: "IgnoreUnknown=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			socket := filepath.Join(t.TempDir(), "absent.sock")
			var a *agent
			if tt.agentUp {
				a = startAgent(t, tt.resp)
				socket = a.socket
			}
			p, out, _ := newPlugin()
			err := p.check(cmdArgs(conf(t, "1.0.0", prev100, socket, t.TempDir(), tt.extra), tt.args))
			if cniCode(err) != tt.wantErr || (tt.wantErr == 0 && err != nil) {
				t.Errorf("err %v, want code %d", err, tt.wantErr)
			}
			if out.Len() != 0 {
				t.Errorf("CHECK printed %q", out)
			}
			if a != nil {
				if got := a.requests(); len(got) != 1 || got[0].Command != cniproto.CmdCheck || !reflect.DeepEqual(got[0].IPs, []string{"10.22.0.5/16", "fd00:22::5/64"}) {
					t.Errorf("agent got %+v, want one CHECK with the IPs", got)
				}
			}
		})
	}
}

func TestStatus(t *testing.T) {
	up := startAgent(t, cniproto.Response{OK: true})
	tests := []struct {
		name    string
		socket  string
		extra   string
		wantErr uint
	}{
		{"fail open, agent down", "/nonexistent/cni.sock", "", 0},
		{"fail closed, agent down", "/nonexistent/cni.sock", `,"fail_closed":true`, types.ErrPluginNotAvailable},
		{"fail closed, agent up", up.socket, `,"fail_closed":true`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, _ := newPlugin()
			err := p.status(&skel.CmdArgs{StdinData: conf(t, "1.1.0", "", tt.socket, "/run/x", tt.extra)})
			if cniCode(err) != tt.wantErr || (tt.wantErr == 0 && err != nil) {
				t.Errorf("err %v, want code %d", err, tt.wantErr)
			}
		})
	}
	if got := up.requests(); len(got) != 0 {
		t.Errorf("STATUS sent requests: %+v", got)
	}
}

func TestParseConf(t *testing.T) {
	tests := []struct {
		name  string
		stdin string
		want  netConf // only the plugin's keys compared
		err   string
	}{
		{"defaults", `{"cniVersion":"1.0.0","name":"n","type":"mcpintercept-cni"}`,
			netConf{Socket: defaultSocket, SpoolDir: defaultSpoolDir, timeout: defaultTimeout}, ""},
		{"all keys", `{"cniVersion":"1.0.0","name":"n","type":"mcpintercept-cni","socket":"/s.sock","spool_dir":"/sp","fail_closed":true,"timeout":"250ms"}`,
			netConf{Socket: "/s.sock", SpoolDir: "/sp", FailClosed: true, Timeout: "250ms", timeout: 250 * time.Millisecond}, ""},
		{"relative socket", `{"cniVersion":"1.0.0","socket":"cni.sock"}`, netConf{}, "absolute path"},
		{"relative spool", `{"cniVersion":"1.0.0","spool_dir":"spool"}`, netConf{}, "absolute path"},
		{"zero timeout", `{"cniVersion":"1.0.0","timeout":"0s"}`, netConf{}, "timeout"},
		{"huge timeout", `{"cniVersion":"1.0.0","timeout":"1h"}`, netConf{}, "timeout"},
		{"malformed", `{"cniVersion":`, netConf{}, "parse network configuration"},
		{"bad prevResult", `{"cniVersion":"1.0.0","prevResult":{"ips":[{"address":"nope"}]}}`, netConf{}, "prevResult"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConf([]byte(tt.stdin))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := netConf{Socket: c.Socket, SpoolDir: c.SpoolDir, FailClosed: c.FailClosed, Timeout: c.Timeout, timeout: c.timeout}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("conf %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSupportedVersions(t *testing.T) {
	if got, want := supported.SupportedVersions(), []string{"0.4.0", "1.0.0", "1.1.0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("versions %v, want %v", got, want)
	}
}
