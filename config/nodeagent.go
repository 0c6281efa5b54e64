package config

import (
	"strings"
	"time"
)

// NodeAgentConfig is node_agent: how `mcpintercept node-agent` learns of pods (its CNI plugin's
// socket, the pod list), which pods it enrols, and what happens to them when it is down. `run`
// ignores the section; the agent ignores mechanism and listen (it steers inside each pod's
// network namespace with nftables-tproxy, listening on 127.0.0.1 and ::1 at node_agent.port)
// and uses the rest: intercept.ports and intercept.destinations are what it steers in each pod,
// and the routes, rule sets, limits and logs are the appliance's.
type NodeAgentConfig struct {
	// Socket is the Unix socket the CNI plugin (mcpintercept-cni) sends ADD, DEL and CHECK to.
	Socket string `yaml:"socket"`
	// SpoolDir is where the CNI plugin leaves the ADDs it could not deliver while the agent was
	// down; the agent enrols them when it starts.
	SpoolDir string `yaml:"spool_dir"`
	// StateDir keeps the enrolled pods (uid, network namespace path), so that a restarted agent
	// adopts them.
	StateDir string `yaml:"state_dir"`
	// PodsDir, when set, is the pod list: a directory of Kubernetes Pod and Namespace objects
	// (JSON or YAML, one per file) instead of the Kubernetes API (tests, static nodes).
	PodsDir string `yaml:"pods_dir"`
	// Kubeconfig is the API's client configuration; "" is in-cluster (the service account).
	Kubeconfig string `yaml:"kubeconfig"`
	// NodeName selects the pods of this node from the API; "" reads $NODE_NAME.
	NodeName string `yaml:"node_name"`
	// NamespaceLabel enrols every pod of a namespace carrying it: key=value, or a key alone
	// (any value).
	NamespaceLabel string `yaml:"namespace_label"`
	// PodAnnotation enrols a pod whose annotation is "enabled". Its value "disabled" leaves a
	// pod of a selected namespace out only when AllowPodOptOut is set.
	PodAnnotation string `yaml:"pod_annotation"`
	// AllowPodOptOut lets a pod's annotation "disabled" take it out of its namespace's
	// interception. Off by default: the annotation is the workload owner's to write, the
	// namespace label the operator's, so a workload must not be able to exempt itself.
	AllowPodOptOut bool `yaml:"allow_pod_opt_out"`
	// Port is the transparent listener's port inside each pod's network namespace.
	Port uint16 `yaml:"port"`
	// Failure is what an enrolled pod's traffic does while the agent is not running:
	// FailOpen (its steering lapses after Heartbeat, traffic goes direct) or FailClosed (the
	// steering stays: intercepted connections fail until the agent is back).
	Failure string `yaml:"failure"`
	// Heartbeat is how long a fail-open pod's steering outlives the agent's last sign of life.
	Heartbeat Duration `yaml:"heartbeat"`
}

// Values and defaults of node_agent.
const (
	FailOpen   = "open"
	FailClosed = "closed"

	DefaultNodeAgentSocket    = "/run/mcpintercept/cni.sock"
	DefaultNodeAgentSpoolDir  = "/run/mcpintercept/cni-spool"
	DefaultNodeAgentStateDir  = "/var/lib/mcpintercept/node-agent"
	DefaultNamespaceLabel     = "mcpintercept.io/intercept=enabled"
	DefaultPodAnnotation      = "mcpintercept.io/intercept"
	DefaultNodeAgentPort      = 15001
	DefaultNodeAgentHeartbeat = 5 * time.Second
	minNodeAgentHeartbeat     = time.Second
	maxNodeAgentHeartbeat     = 10 * time.Minute
)

// nodeAgentKeys are node_agent's part of configTable (appended in init: the table is one
// literal, and the section comes last in the file format).
var nodeAgentKeys = table[Config]{
	key("node_agent.socket", "Unix socket the CNI plugin talks to", func(c *Config) *string { return &c.NodeAgent.Socket }, str).
		def(DefaultNodeAgentSocket).checked(checkAbsPath),
	key("node_agent.spool_dir", "where the CNI plugin leaves ADDs the agent was down for", func(c *Config) *string { return &c.NodeAgent.SpoolDir }, str).
		def(DefaultNodeAgentSpoolDir).checked(checkAbsPath),
	key("node_agent.state_dir", "the agent's record of enrolled pods (relative to this file)", func(c *Config) *string { return &c.NodeAgent.StateDir }, str).
		def(DefaultNodeAgentStateDir),
	key("node_agent.pods_dir", "a directory of Pod and Namespace objects read instead of the Kubernetes API (relative to this file)", func(c *Config) *string { return &c.NodeAgent.PodsDir }, str),
	key("node_agent.kubeconfig", "Kubernetes client configuration (empty: in-cluster)", func(c *Config) *string { return &c.NodeAgent.Kubeconfig }, str),
	key("node_agent.node_name", "this node's name (empty: $NODE_NAME)", func(c *Config) *string { return &c.NodeAgent.NodeName }, str),
	key("node_agent.namespace_label", "label (key=value, or key) that enrols a namespace's pods", func(c *Config) *string { return &c.NodeAgent.NamespaceLabel }, str).
		def(DefaultNamespaceLabel).checked(checkLabelSelector),
	key("node_agent.pod_annotation", "annotation that enrols one pod (enabled), or with allow_pod_opt_out leaves it out (disabled)", func(c *Config) *string { return &c.NodeAgent.PodAnnotation }, str).
		def(DefaultPodAnnotation).checked(checkLabelKey),
	key("node_agent.allow_pod_opt_out", "whether the pod annotation disabled overrides the namespace label (the workload owner writes annotations)", func(c *Config) *bool { return &c.NodeAgent.AllowPodOptOut }, boolean),
	intKey("node_agent.port", "port of the transparent listener inside each pod", func(c *Config) *uint16 { return &c.NodeAgent.Port }, checkPort).
		def(DefaultNodeAgentPort),
	key("node_agent.failure", "an enrolled pod's traffic while the agent is down: open or closed", func(c *Config) *string { return &c.NodeAgent.Failure }, str).
		def(FailOpen).checked(func(s string) string { return checkOneOf(s, FailOpen, FailClosed) }),
	key("node_agent.heartbeat", "how long a fail-open pod's steering outlives the agent", func(c *Config) *Duration { return &c.NodeAgent.Heartbeat }, duration).
		def(Duration{DefaultNodeAgentHeartbeat}).checked(durationBetween(minNodeAgentHeartbeat, maxNodeAgentHeartbeat)),
}

func init() { configTable = append(configTable, nodeAgentKeys...) }

func checkAbsPath(s string) string {
	if !strings.HasPrefix(s, "/") {
		return "must be an absolute path"
	}
	return ""
}

// checkLabelSelector accepts key or key=value with a Kubernetes label key.
func checkLabelSelector(s string) string {
	k, v, _ := strings.Cut(s, "=")
	if m := checkLabelKey(k); m != "" {
		return m
	}
	if len(v) > 63 || strings.ContainsAny(v, " =,") {
		return "the value must be a label value (at most 63 characters, no spaces, = or ,)"
	}
	return ""
}

// checkLabelKey accepts a Kubernetes label or annotation key: an optional DNS prefix and a slash,
// then a name of at most 63 characters.
func checkLabelKey(s string) string {
	prefix, name, ok := strings.Cut(s, "/")
	if !ok {
		prefix, name = "", s
	}
	if name == "" || len(name) > 63 || (ok && (prefix == "" || len(prefix) > 253)) {
		return "must be a label key: [prefix/]name, the name at most 63 characters"
	}
	for _, r := range prefix + name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return "must be a label key: letters, digits, '-', '_', '.' (and one '/' after a DNS prefix)"
		}
	}
	return ""
}
