//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// The node agent's lab: "pods" are network namespaces (mcpi-cni-<name>) attached to their own
// bridge by Debian's CNI plugins (bridge, host-local, loopback) with mcpintercept-cni chained,
// run through libcni as a container runtime would. Nothing of it shares the lab's 10.200.x.

const (
	naBridge    = "mcpi-cni0"
	naSubnet    = "10.201.0.0/24"
	naNSPrefix  = "mcpi-cni-"
	naAdmin     = "127.0.0.1:19480"
	naPort      = 3027
	naDebianCNI = "/usr/lib/cni"
)

// naLab is one run's CNI network, pod objects and agent files.
type naLab struct {
	t       *testing.T
	dir     string // the agent's files: socket, spool, state, pods, ca, flows
	cni     *libcni.CNIConfig
	netconf *libcni.NetworkConfigList
	pods    map[string]*naPod
	order   []string // pods in the order they were made, for the cleanup
	uids    int
	agents  []*naAgent // stopped after the pods' DELs, so that the DELs reach a running agent
	// allowOptOut is node_agent.allow_pod_opt_out of the agents started from now on.
	allowOptOut bool
}

// naPod is one pod: its Kubernetes object and, once added, its network namespace and address.
type naPod struct {
	Name, Namespace, UID, ServiceAccount string
	Labels, Annotations                  map[string]string

	netns string // ip netns name
	ip    string // the pod's address from the CNI result
	added bool
}

func (p *naPod) nsPath() string { return "/var/run/netns/" + p.netns }

// naNeed skips unless the e2e environment, Debian's CNI plugins and the parts under test exist.
func naNeed(t *testing.T) {
	t.Helper()
	needLab(t)
	if _, err := os.Stat(filepath.Join(naDebianCNI, "bridge")); err != nil {
		t.Skipf("the node agent e2e needs Debian's containernetworking-plugins (%s/bridge): %v; run scripts/deps.sh", naDebianCNI, err)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "cmd", "mcpintercept-cni")); err != nil {
		t.Skip("cmd/mcpintercept-cni (the chained CNI plugin) is not in this tree yet")
	}
	out, _ := exec.Command(bin("mcpintercept"), "node-agent", "--help").CombinedOutput()
	if strings.Contains(string(out), "not built yet") {
		t.Skip("mcpintercept node-agent is not built yet")
	}
}

// naSetup makes the lab: the plugin built onto a CNI path beside Debian's, the conflist, the
// Namespace objects, and a cleanup that removes every pod, the bridge and the files.
func naSetup(t *testing.T) *naLab {
	t.Helper()
	naSweep()
	// Not t.TempDir: a Unix socket path must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "mcpi-na-")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"cnibin", "cnicache", "ipam", "spool", "state", "pods"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l := &naLab{t: t, dir: dir, pods: map[string]*naPod{}}
	t.Cleanup(func() {
		for i := len(l.order) - 1; i >= 0; i-- {
			if p := l.pods[l.order[i]]; p.added {
				if err := l.del(p); err != nil {
					t.Errorf("cleanup: CNI DEL %s: %v", p.Name, err)
				}
			}
		}
		for _, a := range l.agents {
			a.stopTerm(t)
		}
		for _, name := range l.order {
			exec.Command("ip", "netns", "delete", l.pods[name].netns).Run()
		}
		exec.Command("ip", "link", "delete", naBridge).Run()
		os.RemoveAll(dir)
		if left := naLeftovers(); left != "" {
			t.Errorf("cleanup left behind:\n%s", left)
		}
	})

	build := exec.Command("go", "build", "-o", filepath.Join(dir, "cnibin", "mcpintercept-cni"), "./cmd/mcpintercept-cni")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the CNI plugin: %v\n%s", err, out)
	}
	var conf bytes.Buffer
	naTemplate(t, "conflist.json.tmpl", &conf, map[string]string{"Bridge": naBridge, "Subnet": naSubnet, "Dir": dir})
	l.netconf, err = libcni.ConfListFromBytes(conf.Bytes())
	if err != nil {
		t.Fatalf("conflist: %v\n%s", err, conf.String())
	}
	l.cni = libcni.NewCNIConfigWithCacheDir([]string{filepath.Join(dir, "cnibin"), naDebianCNI}, filepath.Join(dir, "cnicache"), nil)
	for _, ns := range []string{"namespace-agents.yaml", "namespace-plain.yaml"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "e2e", "testdata", "nodeagent", ns))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pods", ns), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// naSweep removes what an earlier run that was killed may have left (names only this test uses).
func naSweep() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], naNSPrefix) {
			exec.Command("ip", "netns", "delete", f[0]).Run()
		}
	}
	exec.Command("ip", "link", "delete", naBridge).Run()
}

// naLeftovers reports our namespaces and links still on the host.
func naLeftovers() string {
	var b strings.Builder
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, naNSPrefix) {
			fmt.Fprintf(&b, "netns %s\n", l)
		}
	}
	out, _ = exec.Command("ip", "-o", "link", "show").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, naBridge) {
			fmt.Fprintf(&b, "link %s\n", l)
		}
	}
	return b.String()
}

func naTemplate(t *testing.T, name string, w *bytes.Buffer, data any) {
	t.Helper()
	tmpl, err := template.ParseFiles(filepath.Join(repoRoot, "e2e", "testdata", "nodeagent", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := tmpl.Execute(w, data); err != nil {
		t.Fatal(err)
	}
}

// config writes an agent configuration whose flow log is flows (a file name in the lab dir).
func (l *naLab) config(flows string) string {
	l.t.Helper()
	var b bytes.Buffer
	naTemplate(l.t, "agent.yaml.tmpl", &b, map[string]string{"Dir": l.dir, "Admin": naAdmin, "Flows": l.file(flows), "AllowOptOut": fmt.Sprint(l.allowOptOut)})
	path := l.file("agent-" + strings.TrimSuffix(flows, filepath.Ext(flows)) + ".yaml")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		l.t.Fatal(err)
	}
	return path
}

func (l *naLab) file(name string) string { return filepath.Join(l.dir, name) }

// pod writes the pod's object into pods_dir (the API server knows a pod before kubelet runs
// CNI) and makes its network namespace; add attaches it.
func (l *naLab) pod(name, namespace string, labels map[string]string) *naPod {
	l.t.Helper()
	p := &naPod{Name: name, Namespace: namespace, ServiceAccount: "sa-" + name, Labels: labels, netns: naNSPrefix + name}
	l.writePod(p)
	if out, err := exec.Command("ip", "netns", "add", p.netns).CombinedOutput(); err != nil {
		l.t.Fatalf("ip netns add %s: %v: %s", p.netns, err, out)
	}
	l.pods[name] = p
	l.order = append(l.order, name)
	return p
}

// repod replaces a pod (detached) by a new object of the same name: a new uid, these annotations.
func (l *naLab) repod(p *naPod, annotations map[string]string) {
	l.t.Helper()
	p.Annotations = annotations
	p.UID = ""
	l.writePod(p)
}

func (l *naLab) writePod(p *naPod) {
	l.t.Helper()
	if p.UID == "" {
		l.uids++
		p.UID = fmt.Sprintf("4f1c0de0-0000-4000-8000-%012d", l.uids)
	}
	meta := map[string]any{"name": p.Name, "namespace": p.Namespace, "uid": p.UID, "labels": p.Labels}
	if p.Annotations != nil {
		meta["annotations"] = p.Annotations
	}
	obj := map[string]any{
		"apiVersion": "v1", "kind": "Pod", "metadata": meta,
		"spec": map[string]any{"serviceAccountName": p.ServiceAccount, "containers": []any{map[string]any{"name": "main", "image": "none"}}},
	}
	if p.ip != "" {
		// What kubelet reports once the sandbox has its address.
		obj["status"] = map[string]any{"podIP": p.ip, "podIPs": []any{map[string]any{"ip": p.ip}}}
	}
	b, _ := json.MarshalIndent(obj, "", "  ")
	// Written whole then renamed: the agent never reads half a pod.
	path := filepath.Join(l.dir, "pods", "pod-"+p.Namespace+"-"+p.Name+".json")
	tmp := filepath.Join(l.dir, "pod.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.t.Fatal(err)
	}
}

func (l *naLab) runtimeConf(p *naPod) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: "mcpi-" + p.UID,
		NetNS:       p.nsPath(),
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.Namespace},
			{"K8S_POD_NAME", p.Name},
			{"K8S_POD_UID", p.UID},
		},
	}
}

// add runs the conflist's ADD for the pod (as kubelet would) and returns how long it took.
func (l *naLab) add(p *naPod) time.Duration {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	res, err := l.cni.AddNetworkList(ctx, l.netconf, l.runtimeConf(p))
	took := time.Since(start)
	if err != nil {
		l.t.Fatalf("CNI ADD %s/%s: %v", p.Namespace, p.Name, err)
	}
	p.added = true
	r, err := types100.NewResultFromResult(res)
	if err != nil || len(r.IPs) == 0 {
		l.t.Fatalf("CNI ADD %s: result %v without an address: %v", p.Name, res, err)
	}
	p.ip = r.IPs[0].Address.IP.String()
	return took
}

func (l *naLab) del(p *naPod) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := l.cni.DelNetworkList(ctx, l.netconf, l.runtimeConf(p))
	if err == nil {
		p.added = false
	}
	return err
}

// naAgent is a running `mcpintercept node-agent` on the host.
type naAgent struct {
	*proc
	flows string
}

// startAgent runs the agent on cfg and waits until /readyz answers 200 (pods adopted, spool read).
func (l *naLab) startAgent(flows string) *naAgent {
	l.t.Helper()
	cfg := l.config(flows)
	cmd := exec.Command(bin("mcpintercept"), "node-agent", "--config", cfg)
	p := &proc{name: "node-agent", cmd: cmd, stdout: &syncBuf{}, stderr: &syncBuf{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.Dir = l.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	a := &naAgent{proc: p, flows: l.file(flows)}
	l.agents = append(l.agents, a)
	deadline := time.Now().Add(90 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get("http://" + naAdmin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return a
			}
		}
		select {
		case <-p.done:
			l.t.Fatalf("node-agent exited (%v) before it was ready:\nstderr:\n%s", p.err, p.stderr)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			l.t.Fatalf("node-agent not ready within 90s (last: %v):\nstderr:\n%s", err, p.stderr)
		}
	}
}

// stopTerm stops the agent with SIGTERM (unless it is gone already).
func (a *naAgent) stopTerm(t *testing.T) {
	select {
	case <-a.done:
		return
	default:
	}
	if err := a.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Errorf("node-agent did not stop cleanly on SIGTERM: %v\nstderr:\n%s", err, a.stderr)
	}
}

// naRecord is a flow record with the pod the node agent names.
type naRecord struct {
	flowRecord
	Pod *struct {
		Namespace      string `json:"namespace"`
		Name           string `json:"name"`
		UID            string `json:"uid"`
		ServiceAccount string `json:"service_account"`
	} `json:"pod"`
}

func (r naRecord) podName() string {
	if r.Pod == nil {
		return ""
	}
	return r.Pod.Namespace + "/" + r.Pod.Name
}

// records reads the agent's flow log (JSON lines) as it stands.
func (a *naAgent) records(t *testing.T) []naRecord {
	t.Helper()
	b, err := os.ReadFile(a.flows)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []naRecord
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r naRecord
		if err := json.Unmarshal(line, &r); err != nil {
			// The last line may be mid-write.
			continue
		}
		out = append(out, r)
	}
	return out
}

// waitRecords polls the flow log until ok holds for its records, and returns them.
func (a *naAgent) waitRecords(t *testing.T, what string, ok func([]naRecord) bool) []naRecord {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		recs := a.records(t)
		if ok(recs) {
			return recs
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(a.flows)
			t.Fatalf("flow log: no %s within 60s:\n%s\nagent stderr:\n%s", what, b, a.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// naPodCall counts the tools/call records of a pod for a tool with a decision.
func naPodCalls(recs []naRecord, pod, tool, decision string) int {
	n := 0
	for _, r := range recs {
		if r.podName() == pod && r.MCPMethod == "tools/call" && r.MCPName == tool && r.Decision == decision {
			n++
		}
	}
	return n
}

// naExec runs a command in a pod's network namespace.
func naExec(ctx context.Context, p *naPod, dir string, name string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", p.netns, name}, args...)...)
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}

func naExecT(t *testing.T, p *naPod, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, errOut, err := naExec(ctx, p, repoRoot, name, args...)
	if err != nil {
		t.Fatalf("%s %s in %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), p.netns, err, out, errOut)
	}
	return out
}

// naNode runs the TypeScript SDK client (e2e/node/client.mjs) in a pod.
func naNode(t *testing.T, p *naPod, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, errOut, err := naExec(ctx, p, filepath.Join(repoRoot, "e2e", "node"), "node", append([]string{"client.mjs"}, args...)...)
	if err != nil {
		t.Fatalf("node client %v in %s: %v\nstdout:\n%s\nstderr:\n%s", args, p.netns, err, out, errOut)
	}
	return out
}

// naGo runs the Go SDK client (e2e/peers/mcpclient) in a pod.
func naGo(t *testing.T, p *naPod, args ...string) string {
	t.Helper()
	return naExecT(t, p, bin("mcpclient"), args...)
}

// naSteering is everything of ours in a pod's netns as the kernel reports it: the nftables
// table's rules per chain (set elements and counters left out: they change while it runs), our
// ip rules and routes, and the listener.
type naSteering struct {
	Tables    []string       // nft list tables
	Rules     map[string]int // chain → rules in table inet mcpintercept
	IPRules   []string       // ip rules of ours (proto 0xf5, or the fwmark lookup)
	Routes    []string       // routes of ours (proto 0xf5)
	Listening []string       // sockets listening on the agent's port
}

var naHandle = regexp.MustCompile(`\s*# handle \d+$`)

func naState(t *testing.T, p *naPod) naSteering {
	t.Helper()
	s := naSteering{Rules: map[string]int{}}
	for _, l := range strings.Split(naExecT(t, p, "nft", "list", "tables"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			s.Tables = append(s.Tables, l)
		}
	}
	if s.has("table inet mcpintercept") {
		chain := ""
		depth := 0 // inside a set's block
		for _, l := range strings.Split(naExecT(t, p, "nft", "-a", "list", "table", "inet", "mcpintercept"), "\n") {
			l = strings.TrimSpace(naHandle.ReplaceAllString(l, ""))
			switch {
			case strings.HasPrefix(l, "set ") || strings.HasPrefix(l, "map "):
				depth = 1
			case depth > 0:
				if l == "}" {
					depth = 0
				}
			case strings.HasPrefix(l, "chain "):
				chain = strings.Fields(l)[1]
			case l == "}" || l == "" || strings.HasPrefix(l, "table ") || strings.HasPrefix(l, "type ") || strings.HasPrefix(l, "policy "):
			default:
				s.Rules[chain]++
			}
		}
	}
	for _, fam := range []string{"-4", "-6"} {
		for _, l := range strings.Split(naExecT(t, p, "ip", fam, "rule", "show"), "\n") {
			if naOurs(l) || strings.Contains(l, "lookup 100") {
				s.IPRules = append(s.IPRules, fam+" "+strings.TrimSpace(l))
			}
		}
		for _, l := range strings.Split(naExecT(t, p, "ip", fam, "route", "show", "table", "all"), "\n") {
			if naOurs(l) || strings.Contains(l, "table 100") {
				s.Routes = append(s.Routes, fam+" "+strings.TrimSpace(l))
			}
		}
	}
	for _, l := range strings.Split(naExecT(t, p, "ss", "-Hltn"), "\n") {
		if strings.Contains(l, ":15001 ") {
			s.Listening = append(s.Listening, strings.Join(strings.Fields(l), " "))
		}
	}
	sort.Strings(s.IPRules)
	sort.Strings(s.Routes)
	return s
}

func naOurs(l string) bool {
	return strings.Contains(l, "proto 0xf5") || strings.Contains(l, "proto 245")
}

func (s naSteering) has(table string) bool {
	for _, l := range s.Tables {
		if l == table {
			return true
		}
	}
	return false
}

// empty says what of ours is left ("" when nothing).
func (s naSteering) leftovers() string {
	var b strings.Builder
	for _, l := range s.Tables {
		if strings.Contains(l, "mcpintercept") {
			fmt.Fprintf(&b, "nft %s\n", l)
		}
	}
	for _, l := range append(append([]string{}, s.IPRules...), s.Routes...) {
		fmt.Fprintf(&b, "%s\n", l)
	}
	for _, l := range s.Listening {
		fmt.Fprintf(&b, "listening: %s\n", l)
	}
	return b.String()
}

// counts is the shape compared across an agent restart: rules per chain, ip rules, routes.
func (s naSteering) counts() string {
	chains := make([]string, 0, len(s.Rules))
	for c := range s.Rules {
		chains = append(chains, c)
	}
	sort.Strings(chains)
	var b strings.Builder
	for _, c := range chains {
		fmt.Fprintf(&b, "chain %s: %d rules\n", c, s.Rules[c])
	}
	fmt.Fprintf(&b, "ip rules: %d\n%s\nroutes: %d\n%s\nlistening: %d\n",
		len(s.IPRules), strings.Join(s.IPRules, "\n"), len(s.Routes), strings.Join(s.Routes, "\n"), len(s.Listening))
	return b.String()
}

// naVmRSS is a process's resident set in KiB (/proc/PID/status).
func naVmRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			var kb int
			fmt.Sscan(f[1], &kb)
			return kb
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}
