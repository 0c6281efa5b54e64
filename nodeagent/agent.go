package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"mcpintercept/appliance"
	"mcpintercept/engine"
	"mcpintercept/intercept"
	"mcpintercept/intercept/upstream"
	"mcpintercept/nodeagent/cniproto"
	"mcpintercept/origin"
	"mcpintercept/policy"
)

// Options are what the caller decides instead of the configuration.
type Options struct {
	Log    *slog.Logger
	Stdout io.Writer // the flow log when log.flows is stdout
	// Source replaces the pod list the configuration names (tests).
	Source Source
	// Resync is how often enrolled pods are checked against the pod list (vanished, relabelled)
	// and their namespaces against the node (gone); 0: 10 s.
	Resync time.Duration
}

// Settings are the agent's share of the configuration (node_agent, and the steering and connect
// timeout of every pod's flows), as the caller read it.
type Settings struct {
	// Socket is the CNI plugin's Unix socket; SpoolDir where the plugin leaves the ADDs the agent
	// was down for; StateDir the agent's record of enrolled pods.
	Socket, SpoolDir, StateDir string
	// PodsDir, when set, is the pod list (a directory of objects) instead of the Kubernetes API
	// at Kubeconfig ("" in-cluster); NodeName selects this node's pods.
	PodsDir, Kubeconfig, NodeName string
	// Selector decides which pods are enrolled (SelectorOf).
	Selector Selector
	// Port is the transparent listener's port inside each pod's network namespace.
	Port uint16
	// Failure is node_agent.failure as configured (logged); FailOpen says it is open: a pod's
	// steering lapses Heartbeat after the agent's last sign of life.
	Failure   string
	FailOpen  bool
	Heartbeat time.Duration
	// Steering is the configuration's steering (appliance.SteeringOptions): every pod's starts
	// from it, and its bypass mark is on every upstream dial.
	Steering intercept.Options
	// ConnectTimeout bounds each upstream dial (limits.connect_timeout).
	ConnectTimeout time.Duration
	// InboundPort is the inbound transparent listener's port inside a pod that carries
	// InboundPortsAnnotation (inbound.listen_port; 0: config.DefaultInboundPort).
	InboundPort uint16
}

// Agent is one running node agent.
type Agent struct {
	na  Settings
	opt Options
	log *slog.Logger
	app *appliance.Appliance
	src Source
	sel Selector
	ln  *net.UnixListener

	mu sync.Mutex
	// pods are the pods the agent knows a network namespace of (a CNI ADD, the state file),
	// enrolled or not, by namespace/name.
	pods map[string]*podState

	// byIP is this node's pods by address (the pod list's status.podIPs), the client pods of
	// inbound flows; read at most once a second, on a miss.
	ipMu   sync.Mutex
	byIP   map[netip.Addr]*origin.Pod
	byIPAt time.Time
}

// podState is one pod with a known network namespace.
type podState struct {
	pod         *Pod
	netns       string
	containerID string
	// Set while the pod is enrolled.
	ns   *NS
	mech intercept.Mechanism
	stop []func()
	// inbound is the pod's Sidecar steering, when it carries InboundPortsAnnotation.
	inbound *intercept.Inbound
}

func (p *podState) enrolled() bool { return p.mech != nil }

// New wires an agent: the appliance (routes, rule sets, records, admin listener) without
// listeners of its own, made by newApp (appliance.New with the configuration), the pod list and
// the CNI socket. Nothing is steered before Run.
func New(ctx context.Context, s Settings, newApp func(appliance.Options) (*appliance.Appliance, error), opt Options) (*Agent, error) {
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(s.Steering.Ports) == 0 {
		return nil, &appliance.ConfigError{Err: errors.New("node agent: intercept.ports is empty: nothing would be steered in the pods")}
	}
	a := &Agent{na: s, opt: opt, log: log, sel: s.Selector, pods: map[string]*podState{}}
	a.src = opt.Source
	if a.src == nil {
		if s.PodsDir != "" {
			a.src = &DirSource{Dir: s.PodsDir, Node: s.NodeName}
		} else {
			ks, err := NewKubeSource(s.Kubeconfig, s.NodeName)
			if err != nil {
				return nil, err
			}
			a.src = ks
		}
	}
	app, err := newApp(appliance.Options{Stdout: opt.Stdout, Log: log,
		Mechanism: agentMechanism{}, Listeners: []*net.TCPListener{}, HoldReady: true, Quiet: true})
	if err != nil {
		return nil, err
	}
	a.app = app
	if a.ln, err = cniproto.Listen(s.Socket); err != nil {
		app.Stop(context.Background())
		return nil, fmt.Errorf("node agent: CNI socket: %w", err)
	}
	return a, nil
}

// Appliance is the agent's appliance (tests read its engine and metrics).
func (a *Agent) Appliance() *appliance.Appliance { return a.app }

// Run adopts the pods of the state file, enrols the ADDs spooled while the agent was down, then
// serves the CNI socket and keeps the enrolled pods' heartbeats and the pod list in step, until
// ctx is done. Then, with failure: open, every pod's steering is removed (its traffic goes
// direct); with closed it stays. The appliance is stopped last.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.app.Start(ctx); err != nil {
		a.app.Stop(context.Background())
		a.ln.Close()
		return err
	}
	a.adopt(ctx)
	a.drainSpool(ctx)
	a.app.SetReady()
	a.mu.Lock()
	n := 0
	for _, p := range a.pods {
		if p.enrolled() {
			n++
		}
	}
	a.mu.Unlock()
	a.log.Info("ready", "enrolled", n, "socket", a.na.Socket, "failure", a.na.Failure)

	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		if err := cniproto.Serve(ctx, a.ln, a.handle, a.log.With("component", "cni")); err != nil && ctx.Err() == nil {
			a.log.Error("CNI socket", "err", err)
		}
	}()
	go func() { defer wg.Done(); a.heartbeats(ctx) }()
	go func() { defer wg.Done(); a.resyncs(ctx) }()
	<-ctx.Done()
	a.ln.Close()
	wg.Wait()
	a.shutdown()
	return a.app.Stop(context.Background())
}

// Reload re-reads routes and rule sets (SIGHUP).
func (a *Agent) Reload() error { return a.app.Reload("") }

// shutdown releases every pod: its listener closes; its steering goes with failure: open and
// stays with closed. The state file keeps them all, for the next agent to adopt.
func (a *Agent) shutdown() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pods {
		if !p.enrolled() {
			continue
		}
		a.release(p, a.na.FailOpen)
	}
	os.Remove(a.na.Socket)
}

// handle answers one CNI plugin request.
func (a *Agent) handle(ctx context.Context, req cniproto.Request) cniproto.Response {
	switch req.Command {
	case cniproto.CmdAdd:
		enrolled, err := a.add(ctx, req.Pod, req.Netns, req.ContainerID)
		if err != nil {
			a.log.Warn("CNI ADD", "pod", req.Pod.Namespace+"/"+req.Pod.Name, "err", err)
			return cniproto.Response{Error: err.Error()}
		}
		return cniproto.Response{OK: true, Enrolled: enrolled}
	case cniproto.CmdDel:
		a.del(req.Pod)
		return cniproto.Response{OK: true}
	case cniproto.CmdCheck:
		enrolled, err := a.check(ctx, req.Pod, req.Netns)
		if err != nil {
			return cniproto.Response{Error: err.Error()}
		}
		return cniproto.Response{OK: true, Enrolled: enrolled}
	}
	return cniproto.Response{Error: fmt.Sprintf("unknown command %q", req.Command)}
}

// add is a CNI ADD (or a spooled one): the pod's namespace is recorded, and the pod enrolled
// when selected.
func (a *Agent) add(ctx context.Context, ref cniproto.PodRef, netns, containerID string) (bool, error) {
	pod, err := a.src.Pod(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return false, err
	}
	if ref.UID != "" && pod.UID != "" && ref.UID != pod.UID {
		return false, fmt.Errorf("pod %s: uid %s, but the pod list has %s (a stale ADD)", pod.Key(), ref.UID, pod.UID)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pods[pod.Key()]
	if p != nil && p.netns != netns {
		// A new sandbox for the same pod: the old namespace is gone or going.
		if p.enrolled() {
			a.release(p, true)
		}
		p = nil
	}
	if p == nil {
		p = &podState{netns: netns}
		a.pods[pod.Key()] = p
	}
	p.pod, p.containerID = pod, containerID
	on, err := a.reconcile(ctx, p)
	a.save()
	return on, err
}

// reconcile enrols p when it is selected (repairing its steering when it already is) and
// releases it when it is not. Called with a.mu held.
func (a *Agent) reconcile(ctx context.Context, p *podState) (bool, error) {
	labels, err := a.src.NamespaceLabels(ctx, p.pod.Namespace)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return p.enrolled(), err
	}
	on, why := a.sel.Selected(p.pod, labels)
	switch {
	case on:
		if !p.enrolled() && a.sel.OptOutIgnored(p.pod) {
			// A workload asking not to be inspected is worth an operator's look.
			a.log.Warn("pod annotated to opt out is enrolled: its namespace is selected and node_agent.allow_pod_opt_out is false", "pod", p.pod.Key())
		}
		if err := a.enrol(ctx, p); err != nil {
			return false, err
		}
		return true, nil
	case p.enrolled():
		a.release(p, true)
		a.log.Info("pod removed", "pod", p.pod.Key(), "reason", why)
	default:
		a.log.Debug("pod not selected", "pod", p.pod.Key(), "reason", why)
	}
	return false, nil
}

// steeringOptions are the steering installed in every pod's namespace: nftables-tproxy of the
// host's own processes (the pod's), to the listener on loopback.
func (a *Agent) steeringOptions(v6 bool) intercept.Options {
	o := a.na.Steering
	o.Mechanism = origin.NftablesTProxy
	o.Listen = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	if v6 {
		o.Listen = append(o.Listen, netip.IPv6Loopback())
	}
	o.Port = a.na.Port
	o.Local = true
	if len(o.Destinations) == 0 {
		o.Destinations = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	}
	if a.na.FailOpen {
		o.Heartbeat = a.na.Heartbeat
	}
	return o
}

// enrol installs p's steering in its namespace and serves its listener; on an enrolled pod it
// reinstalls the steering in place (the table is replaced in one transaction, the ip rule and
// route are not added twice), which is how an agent repairs what it adopts.
func (a *Agent) enrol(ctx context.Context, p *podState) error {
	start := time.Now()
	if p.enrolled() {
		if err := p.ns.Do(func() error { return p.mech.Install(ctx) }); err != nil {
			return fmt.Errorf("pod %s: repair steering: %w", p.pod.Key(), err)
		}
		return nil
	}
	ns, err := OpenNS(p.netns)
	if err != nil {
		return fmt.Errorf("pod %s: %w", p.pod.Key(), err)
	}
	var lns []*net.TCPListener
	var mech intercept.Mechanism
	err = ns.Do(func() error {
		v4, err := intercept.Listen(ctx, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, a.na.Port, true)
		if err != nil {
			return err
		}
		lns = v4
		// IPv6 when the pod has it (a pod with IPv6 disabled has no ::1).
		if v6, err := intercept.Listen(ctx, []netip.Addr{netip.IPv6Loopback()}, a.na.Port, true); err == nil {
			lns = append(lns, v6...)
		}
		if mech, err = intercept.New(a.steeringOptions(len(lns) > 1)); err != nil {
			return err
		}
		return mech.Install(ctx)
	})
	if err != nil {
		for _, l := range lns {
			l.Close()
		}
		ns.Close()
		return fmt.Errorf("pod %s: install steering: %w", p.pod.Key(), err)
	}
	opod := &origin.Pod{Namespace: p.pod.Namespace, Name: p.pod.Name, UID: p.pod.UID,
		ServiceAccount: p.pod.ServiceAccount, Labels: p.pod.Labels}
	src := engine.Source{
		Steering: podSteering{mech: mech, pod: opod},
		Dialer:   &nsDialer{ns: ns, base: upstream.BypassDialer(a.na.Steering.BypassMark, a.na.ConnectTimeout)},
		Pod: &policy.Pod{Namespace: opod.Namespace, Name: opod.Name, UID: opod.UID,
			ServiceAccount: opod.ServiceAccount, Labels: opod.Labels},
	}
	p.ns, p.mech = ns, mech
	for _, l := range lns {
		stop, err := a.app.ServeSource(l, src)
		if err != nil {
			l.Close()
			a.release(p, true)
			return fmt.Errorf("pod %s: serve: %w", p.pod.Key(), err)
		}
		p.stop = append(p.stop, stop)
	}
	if err := a.enrolInbound(ctx, p); err != nil {
		a.release(p, true)
		return fmt.Errorf("pod %s: inbound: %w", p.pod.Key(), err)
	}
	a.log.Info("pod enrolled", "pod", p.pod.Key(), "netns", p.netns, "inbound", p.inbound != nil, "took", time.Since(start).Round(time.Microsecond))
	return nil
}

// enrolInbound intercepts the connections arriving for the ports of p's InboundPortsAnnotation
// in p's namespace (Sidecar mode): a transparent listener on loopback, the inbound table, and a
// source whose dialer reaches the pod's server from the client's own address and whose Origin
// names the client pod (by its address in the pod list). A malformed annotation is logged and
// the pod served without it. Called with a.mu held, p.ns open.
func (a *Agent) enrolInbound(ctx context.Context, p *podState) error {
	ports, err := p.pod.InboundPorts()
	if err != nil {
		a.log.Warn("pod served without inbound interception", "pod", p.pod.Key(), "err", err)
		return nil
	}
	if len(ports) == 0 {
		return nil
	}
	port := a.na.InboundPort
	if port == 0 {
		port = 15006
	}
	var lns []*net.TCPListener
	var in *intercept.Inbound
	err = p.ns.Do(func() error {
		v4, err := intercept.Listen(ctx, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, port, true)
		if err != nil {
			return err
		}
		lns = v4
		if v6, err := intercept.Listen(ctx, []netip.Addr{netip.IPv6Loopback()}, port, true); err == nil {
			lns = append(lns, v6...)
		}
		o := intercept.InboundOptions{Ports: ports, ListenPort: port,
			Mark: a.na.Steering.Mark, BypassMark: a.na.Steering.BypassMark,
			RouteTable: a.na.Steering.RouteTable, RulePriority: a.na.Steering.RulePriority}
		for _, l := range lns {
			if ap, err := origin.AddrPortOf(l.Addr()); err == nil {
				o.Listen = append(o.Listen, ap.Addr())
			}
		}
		if a.na.FailOpen {
			o.Heartbeat = a.na.Heartbeat
		}
		in = intercept.NewInbound(o)
		return in.Install(ctx)
	})
	if err != nil {
		for _, l := range lns {
			l.Close()
		}
		return err
	}
	p.inbound = in
	src := engine.Source{
		Steering:       inboundSteering{in: in, clientPod: a.podByIP},
		Dialer:         &nsDialer{ns: p.ns, base: upstream.TransparentDialer(a.na.Steering.BypassMark, a.na.ConnectTimeout)},
		Mode:           appliance.ModeSidecar,
		DialFromClient: true,
	}
	for _, l := range lns {
		stop, err := a.app.ServeSource(l, src)
		if err != nil {
			l.Close()
			return fmt.Errorf("serve: %w", err)
		}
		p.stop = append(p.stop, stop)
	}
	return nil
}

// podByIP is the pod of this node whose address is ip, as the pod list says (nil: none known).
// The list is read again on a miss, at most once a second.
func (a *Agent) podByIP(ip netip.Addr) *origin.Pod {
	ip = ip.Unmap()
	a.ipMu.Lock()
	defer a.ipMu.Unlock()
	if p, ok := a.byIP[ip]; ok {
		return p
	}
	if time.Since(a.byIPAt) < time.Second {
		return nil
	}
	a.byIPAt = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pods, err := a.src.Pods(ctx)
	if err != nil && len(pods) == 0 {
		a.log.Warn("pod list for inbound clients", "err", err)
		return nil
	}
	a.byIP = map[netip.Addr]*origin.Pod{}
	for _, p := range pods {
		op := &origin.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ServiceAccount: p.ServiceAccount, Labels: p.Labels}
		for _, a2 := range p.IPs {
			a.byIP[a2] = op
		}
	}
	return a.byIP[ip]
}

// inboundSteering is an inbound flow's Origin: the server's address the client connected to, and
// the client pod when the pod list has its address.
type inboundSteering struct {
	in        *intercept.Inbound
	clientPod func(netip.Addr) *origin.Pod
}

func (s inboundSteering) Origin(c *net.TCPConn) (origin.Origin, error) {
	o, err := s.in.Origin(c)
	if err != nil {
		return o, err
	}
	if ra, err := origin.AddrPortOf(c.RemoteAddr()); err == nil {
		o.Pod = s.clientPod(ra.Addr())
	}
	return o, nil
}

// release closes p's listeners and, when unsteer is set, removes its steering from its
// namespace. Called with a.mu held.
func (a *Agent) release(p *podState, unsteer bool) {
	for _, stop := range p.stop {
		stop()
	}
	p.stop = nil
	if unsteer && p.mech != nil {
		if err := p.ns.Do(func() error { return p.mech.Remove(context.Background()) }); err != nil {
			a.log.Warn("remove a pod's steering", "pod", p.pod.Key(), "netns", p.netns, "err", err)
		}
	}
	if unsteer && p.inbound != nil && p.ns != nil {
		if err := p.ns.Do(func() error { return p.inbound.Remove(context.Background()) }); err != nil {
			a.log.Warn("remove a pod's inbound steering", "pod", p.pod.Key(), "netns", p.netns, "err", err)
		}
	}
	if p.ns != nil {
		p.ns.Close()
	}
	p.ns, p.mech, p.inbound = nil, nil, nil
}

// scrub removes whatever steering of ours p's namespace has, for a pod the agent does not
// enrol (removal is idempotent: nothing to remove is no error).
func (a *Agent) scrub(p *podState) {
	ns, err := OpenNS(p.netns)
	if err != nil {
		a.log.Warn("remove a pod's leftover steering", "pod", p.pod.Key(), "netns", p.netns, "err", err)
		return
	}
	defer ns.Close()
	err = ns.Do(func() error {
		mech, err := intercept.New(a.steeringOptions(false))
		if err != nil {
			return err
		}
		_, ierr := intercept.CleanupInbound(context.Background())
		return errors.Join(mech.Remove(context.Background()), ierr)
	})
	if err != nil {
		a.log.Warn("remove a pod's leftover steering", "pod", p.pod.Key(), "netns", p.netns, "err", err)
	}
}

// del is a CNI DEL: everything of ours leaves the pod's namespace, and the agent forgets it.
func (a *Agent) del(ref cniproto.PodRef) {
	a.mu.Lock()
	defer a.mu.Unlock()
	key := ref.Namespace + "/" + ref.Name
	p := a.pods[key]
	if p == nil {
		return
	}
	if ref.UID != "" && p.pod.UID != "" && ref.UID != p.pod.UID {
		return // the DEL of an older incarnation
	}
	if p.enrolled() {
		a.release(p, true)
		a.log.Info("pod removed", "pod", key, "reason", "CNI DEL")
	}
	delete(a.pods, key)
	a.save()
}

// check is a CNI CHECK: a selected pod must be enrolled with its steering in place.
func (a *Agent) check(ctx context.Context, ref cniproto.PodRef, netns string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pods[ref.Namespace+"/"+ref.Name]
	if p == nil || !p.enrolled() {
		pod, err := a.src.Pod(ctx, ref.Namespace, ref.Name)
		if err != nil {
			return false, err
		}
		labels, _ := a.src.NamespaceLabels(ctx, pod.Namespace)
		if on, _ := a.sel.Selected(pod, labels); on {
			return false, fmt.Errorf("pod %s is selected but not enrolled", pod.Key())
		}
		return false, nil
	}
	if p.netns != netns {
		return false, fmt.Errorf("pod %s is enrolled in %s, not %s", p.pod.Key(), p.netns, netns)
	}
	if err := p.ns.Do(intercept.CheckNftTable); err != nil {
		return true, fmt.Errorf("pod %s: %w", p.pod.Key(), err)
	}
	return true, nil
}

// adopt takes over the pods of the state file: each still present is reconciled (its steering
// reinstalled in place when selected), each gone is forgotten.
func (a *Agent) adopt(ctx context.Context) {
	saved, err := loadState(a.na.StateDir)
	if err != nil {
		a.log.Error("state file unreadable; starting without it", "err", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range saved {
		if _, err := os.Stat(s.Netns); err != nil {
			a.log.Info("pod gone while the agent was down", "pod", s.Namespace+"/"+s.Name, "netns", s.Netns)
			continue
		}
		pod, err := a.src.Pod(ctx, s.Namespace, s.Name)
		if err != nil {
			a.log.Warn("adopt", "pod", s.Namespace+"/"+s.Name, "err", err)
			continue
		}
		p := &podState{pod: pod, netns: s.Netns, containerID: s.ContainerID}
		a.pods[pod.Key()] = p
		on, err := a.reconcile(ctx, p)
		if err != nil {
			a.log.Warn("adopt", "pod", pod.Key(), "err", err)
			continue
		}
		if !on {
			// The previous agent may have steered it (the selection or node_agent changed
			// while no agent ran): what it left must not outlive the selection, above all
			// with failure: closed, where it would refuse the pod's connections for good.
			a.scrub(p)
		}
	}
	a.save()
}

// drainSpool enrols the ADDs the CNI plugin spooled while the agent was down.
func (a *Agent) drainSpool(ctx context.Context) {
	reqs, err := cniproto.ReadSpool(a.na.SpoolDir)
	if err != nil {
		a.log.Warn("CNI spool", "err", err)
	}
	for _, r := range reqs {
		if r.Command == cniproto.CmdAdd {
			if _, err := a.add(ctx, r.Pod, r.Netns, r.ContainerID); err != nil {
				a.log.Warn("spooled CNI ADD", "pod", r.Pod.Namespace+"/"+r.Pod.Name, "err", err)
			}
		}
		if err := cniproto.RemoveSpool(a.na.SpoolDir, r); err != nil {
			a.log.Warn("CNI spool", "err", err)
		}
	}
}

// heartbeats refresh every fail-open pod's steering (Options.Heartbeat of intercept) three times
// per heartbeat, so that it lapses only when the agent is gone.
func (a *Agent) heartbeats(ctx context.Context) {
	if !a.na.FailOpen {
		return
	}
	t := time.NewTicker(max(a.na.Heartbeat/3, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.mu.Lock()
		for _, p := range a.pods {
			b, ok := p.mech.(interface{ Beat() error })
			if !ok || !p.enrolled() {
				continue
			}
			if err := p.ns.Do(b.Beat); err != nil {
				a.log.Warn("heartbeat", "pod", p.pod.Key(), "err", err)
			}
			if p.inbound != nil {
				if err := p.ns.Do(p.inbound.Beat); err != nil {
					a.log.Warn("inbound heartbeat", "pod", p.pod.Key(), "err", err)
				}
			}
		}
		a.mu.Unlock()
	}
}

// resyncs keep the pods in step with the pod list and the node: a pod whose namespace is gone or
// that left the pod list is released and forgotten, one whose selection changed is enrolled or
// released.
func (a *Agent) resyncs(ctx context.Context) {
	every := a.opt.Resync
	if every <= 0 {
		every = 10 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.resync(ctx)
	}
}

func (a *Agent) resync(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := false
	for key, p := range a.pods {
		_, statErr := os.Stat(p.netns)
		pod, err := a.src.Pod(ctx, p.pod.Namespace, p.pod.Name)
		if statErr != nil || errors.Is(err, ErrNotFound) {
			if p.enrolled() {
				a.release(p, statErr == nil)
				a.log.Info("pod removed", "pod", key, "reason", "vanished")
			}
			delete(a.pods, key)
			changed = true
			continue
		}
		if err != nil {
			continue // the pod list is unreachable: keep what is
		}
		before := p.enrolled()
		if pod.UID != p.pod.UID || !maps2Equal(pod.Labels, p.pod.Labels) || !maps2Equal(pod.Annotations, p.pod.Annotations) || pod.ServiceAccount != p.pod.ServiceAccount {
			// Identity changed: serve it anew so records and rules see the new labels.
			if p.enrolled() {
				a.release(p, false)
			}
			p.pod = pod
		}
		if _, err := a.reconcile(ctx, p); err != nil {
			a.log.Warn("resync", "pod", key, "err", err)
		}
		changed = changed || before != p.enrolled()
	}
	if changed {
		a.save()
	}
}

func maps2Equal(x, y map[string]string) bool {
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if w, ok := y[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// save writes the state file. Called with a.mu held.
func (a *Agent) save() {
	var out []statePod
	for _, p := range a.pods {
		out = append(out, statePod{Namespace: p.pod.Namespace, Name: p.pod.Name, UID: p.pod.UID, Netns: p.netns, ContainerID: p.containerID})
	}
	if err := saveState(a.na.StateDir, out); err != nil {
		a.log.Error("state file", "err", err)
	}
}

// Enrolled lists the enrolled pods' keys (tests, the admin view).
func (a *Agent) Enrolled() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for k, p := range a.pods {
		if p.enrolled() {
			out = append(out, k)
		}
	}
	return out
}

// podSteering is a pod's Origin: the destination as the pod's nftables-tproxy delivered it, and
// the pod.
type podSteering struct {
	mech intercept.Mechanism
	pod  *origin.Pod
}

func (s podSteering) Origin(c *net.TCPConn) (origin.Origin, error) {
	o, err := s.mech.Origin(c)
	o.Pod = s.pod
	return o, err
}

// agentMechanism is the appliance's own steering under the agent: none (each pod has its own).
type agentMechanism struct{}

func (agentMechanism) Name() origin.Mechanism        { return origin.NftablesTProxy }
func (agentMechanism) Install(context.Context) error { return nil }
func (agentMechanism) Remove(context.Context) error  { return nil }
func (agentMechanism) Origin(*net.TCPConn) (origin.Origin, error) {
	return origin.Origin{}, errors.New("node agent: no listener of its own")
}
