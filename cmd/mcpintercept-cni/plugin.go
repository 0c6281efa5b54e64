package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	cniversion "github.com/containernetworking/cni/pkg/version"

	"mcpintercept/nodeagent/cniproto"
)

// Defaults of the plugin's keys in its conflist entry.
const (
	defaultSocket   = "/run/mcpintercept/cni.sock"
	defaultSpoolDir = "/run/mcpintercept/cni-spool"
	defaultTimeout  = 5 * time.Second
	maxTimeout      = 5 * time.Minute
)

// supported are the CNI spec versions this plugin speaks.
var supported = cniversion.PluginSupports("0.4.0", "1.0.0", "1.1.0")

// netConf is the plugin's entry in the conflist.
type netConf struct {
	types.PluginConf
	Socket     string `json:"socket,omitempty"`
	SpoolDir   string `json:"spool_dir,omitempty"`
	FailClosed bool   `json:"fail_closed,omitempty"`
	Timeout    string `json:"timeout,omitempty"`

	timeout time.Duration
}

func parseConf(stdin []byte) (*netConf, error) {
	conf := &netConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, fmt.Errorf("parse network configuration: %w", err)
	}
	if conf.Socket == "" {
		conf.Socket = defaultSocket
	}
	if conf.SpoolDir == "" {
		conf.SpoolDir = defaultSpoolDir
	}
	for key, p := range map[string]string{"socket": conf.Socket, "spool_dir": conf.SpoolDir} {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("%s %q: must be an absolute path", key, p)
		}
	}
	conf.timeout = defaultTimeout
	if conf.Timeout != "" {
		d, err := time.ParseDuration(conf.Timeout)
		if err != nil || d <= 0 || d > maxTimeout {
			return nil, fmt.Errorf("timeout %q: want a Go duration between 0 and %v", conf.Timeout, maxTimeout)
		}
		conf.timeout = d
	}
	if err := cniversion.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, err
	}
	return conf, nil
}

// k8sArgs are the CNI_ARGS a Kubernetes runtime (containerd, CRI-O) passes.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
}

// podOf reads the pod from CNI_ARGS; ok is false for a container that is not a Kubernetes pod's.
func podOf(args string) (pod cniproto.PodRef, ok bool, err error) {
	a := k8sArgs{}
	a.IgnoreUnknown = true // runtimes add keys of their own
	if err := types.LoadArgs(args, &a); err != nil {
		return pod, false, fmt.Errorf("CNI_ARGS: %w", err)
	}
	pod = cniproto.PodRef{Namespace: string(a.K8S_POD_NAMESPACE), Name: string(a.K8S_POD_NAME), UID: string(a.K8S_POD_UID)}
	return pod, pod.Namespace != "" && pod.Name != "", nil
}

// plugin is the CNI plugin: each command forwards to the node agent and decides, from the
// configuration, what an absent agent means.
type plugin struct {
	stdout io.Writer
	stderr io.Writer
	send   func(ctx context.Context, socket string, req cniproto.Request) (cniproto.Response, error)
}

func (p *plugin) funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.add, Del: p.del, Check: p.check, GC: p.gc, Status: p.status}
}

// request builds what the agent is told; ok is false for a container that is not a pod's.
func request(cmd string, args *skel.CmdArgs, conf *netConf) (cniproto.Request, bool, error) {
	pod, ok, err := podOf(args.Args)
	if err != nil || !ok {
		return cniproto.Request{}, false, err
	}
	req := cniproto.Request{
		Version: cniproto.Version, Command: cmd, ContainerID: args.ContainerID,
		Netns: args.Netns, IfName: args.IfName, Pod: pod,
	}
	if conf.PrevResult != nil {
		res, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return req, true, fmt.Errorf("prevResult: %w", err)
		}
		for _, ip := range res.IPs {
			req.IPs = append(req.IPs, ip.Address.String())
		}
	}
	return req, true, nil
}

func (p *plugin) exchange(conf *netConf, req cniproto.Request) (cniproto.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), conf.timeout)
	defer cancel()
	return p.send(ctx, conf.Socket, req)
}

// unreachable describes a failed exchange with the agent for the stderr line.
func unreachable(err error) string {
	if errors.Is(err, cniproto.ErrUnreachable) {
		return err.Error()
	}
	return "agent not answering: " + err.Error()
}

// note writes the one stderr line a runtime may log.
func (p *plugin) note(format string, a ...any) {
	fmt.Fprintf(p.stderr, "mcpintercept-cni: "+format+"\n", a...)
}

// printPrev prints the previous plugin's result unchanged, as a chained plugin must.
func (p *plugin) printPrev(conf *netConf) error {
	prev := conf.PrevResult
	if prev == nil {
		// First in its chain (a misconfiguration, but not ours to break): an empty result.
		prev = &current.Result{CNIVersion: current.ImplementedSpecVersion}
	}
	res, err := prev.GetAsVersion(conf.CNIVersion)
	if err != nil {
		return fmt.Errorf("prevResult: %w", err)
	}
	return res.PrintTo(p.stdout)
}

func (p *plugin) add(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	req, ok, err := request(cniproto.CmdAdd, args, conf)
	if err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	if !ok {
		return p.printPrev(conf)
	}
	pod := req.Pod.Namespace + "/" + req.Pod.Name
	resp, err := p.exchange(conf, req)
	switch {
	case err != nil && conf.FailClosed:
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("mcpintercept node agent: %v", err), "fail_closed is set: the pod does not start without the agent")
	case err != nil:
		if serr := cniproto.WriteSpool(conf.SpoolDir, req); serr != nil {
			p.note("%s, and the ADD of %s could not be spooled: %v; pod starts unintercepted", unreachable(err), pod, serr)
		} else {
			p.note("%s; ADD of %s spooled for when it starts", unreachable(err), pod)
		}
	case !resp.OK && conf.FailClosed:
		return types.NewError(types.ErrInternal, "mcpintercept node agent refused the pod: "+resp.Error, "")
	case !resp.OK:
		p.note("agent refused %s (%s); pod starts unintercepted", pod, resp.Error)
	}
	return p.printPrev(conf)
}

// del never fails: DEL must succeed even when the agent is gone (the runtime retries a failed DEL
// forever, and a pod that cannot be deleted is worse than one the agent cleans up on its own when
// it starts and finds the netns gone).
func (p *plugin) del(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		p.note("DEL: %v", err)
		return nil
	}
	req, ok, err := request(cniproto.CmdDel, args, conf)
	if err != nil || !ok {
		if err != nil {
			p.note("DEL: %v", err)
		}
		return nil
	}
	// The pod's pending ADD (if the agent was down for it) must never be enrolled now.
	rmErr := cniproto.RemoveSpool(conf.SpoolDir, req)
	resp, err := p.exchange(conf, req)
	switch {
	case err != nil && rmErr != nil:
		p.note("DEL of %s/%s: %s, and its spooled ADD not removed: %v", req.Pod.Namespace, req.Pod.Name, unreachable(err), rmErr)
	case err != nil:
		p.note("DEL of %s/%s: %s", req.Pod.Namespace, req.Pod.Name, unreachable(err))
	case !resp.OK:
		p.note("DEL of %s/%s: agent: %s", req.Pod.Namespace, req.Pod.Name, resp.Error)
	}
	return nil
}

func (p *plugin) check(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	req, ok, err := request(cniproto.CmdCheck, args, conf)
	if err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	if !ok {
		return nil
	}
	resp, err := p.exchange(conf, req)
	switch {
	case err != nil && conf.FailClosed:
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("mcpintercept node agent: %v", err), "")
	case err != nil:
		p.note("CHECK of %s/%s: %s", req.Pod.Namespace, req.Pod.Name, unreachable(err))
	case !resp.OK && conf.FailClosed:
		return types.NewError(types.ErrInternal, "mcpintercept node agent: "+resp.Error, "")
	case !resp.OK:
		p.note("CHECK of %s/%s: agent: %s", req.Pod.Namespace, req.Pod.Name, resp.Error)
	}
	return nil
}

// gc has nothing to collect: the agent itself drops the pods whose network namespace is gone.
func (p *plugin) gc(*skel.CmdArgs) error { return nil }

// status (CNI 1.1) reports the plugin not ready only under fail_closed with no agent listening,
// so that the runtime does not schedule pods that could not start anyway.
func (p *plugin) status(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	if !conf.FailClosed {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), conf.timeout)
	defer cancel()
	if err := probe(ctx, conf.Socket); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("mcpintercept node agent: %v", err), "")
	}
	return nil
}

// probe is whether something accepts on socket.
func probe(ctx context.Context, socket string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return err
	}
	return c.Close()
}
