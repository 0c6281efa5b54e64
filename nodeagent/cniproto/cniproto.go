// Package cniproto is the protocol between the chained CNI plugin (mcpintercept-cni) and the node
// agent: one JSON request and one JSON response per Unix stream connection, each a single object
// ended by a newline, plus the spool directory where the plugin leaves the ADDs it could not
// deliver while the agent was down.
//
// The agent's socket is root-only, yet it decodes strictly and within bounds: the plugin runs with
// whatever CNI_ARGS the runtime passed, and a confused or hostile peer must cost a bounded read,
// never a hung goroutine or an unbounded allocation.
package cniproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
)

// Version is the protocol version; a request of any other version is refused.
const Version = 1

// Commands (CNI_COMMAND values the plugin forwards).
const (
	CmdAdd   = "ADD"
	CmdDel   = "DEL"
	CmdCheck = "CHECK"
)

// Bounds of a request and of its fields.
const (
	// MaxMessageBytes bounds one request or response line, newline included.
	MaxMessageBytes = 64 << 10
	// MaxConns is how many connections Serve handles at once; more wait in the listen backlog.
	MaxConns = 64

	maxContainerID = 256
	maxNetns       = 4096 // PATH_MAX
	maxIfName      = 15   // IFNAMSIZ - 1
	maxNamespace   = 63   // a DNS-1123 label
	maxName        = 253  // a DNS-1123 subdomain
	maxUID         = 128
	maxIPs         = 64
	maxError       = 4096
)

// PodRef names the pod a container belongs to.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// Request is what the plugin forwards for one CNI command.
type Request struct {
	Version     int    `json:"version"`
	Command     string `json:"command"`
	ContainerID string `json:"container_id"`
	// Netns is CNI_NETNS: the pod's network namespace path (may be empty on DEL).
	Netns  string `json:"netns"`
	IfName string `json:"if_name,omitempty"`
	// Pod comes from CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME and K8S_POD_UID.
	Pod PodRef `json:"pod"`
	// IPs are the pod's addresses from prevResult, in CIDR form.
	IPs []string `json:"ips,omitempty"`
}

// Response is the agent's answer.
type Response struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Enrolled (ADD, CHECK): the pod is (now) intercepted.
	Enrolled bool `json:"enrolled,omitempty"`
}

// Validate reports what is wrong with a request: its version and command, an absolute network
// namespace path for ADD and CHECK, the pod's namespace and name, and every length bounded.
func (r *Request) Validate() error {
	if r.Version != Version {
		return fmt.Errorf("unsupported protocol version %d (this agent speaks %d)", r.Version, Version)
	}
	switch r.Command {
	case CmdAdd, CmdDel, CmdCheck:
	default:
		return fmt.Errorf("unknown command %q (want ADD, DEL or CHECK)", bounded(r.Command))
	}
	if r.ContainerID == "" {
		return errors.New("container_id is empty")
	}
	if len(r.ContainerID) > maxContainerID || !printable(r.ContainerID) {
		return fmt.Errorf("container_id: at most %d printable characters", maxContainerID)
	}
	if r.Command != CmdDel || r.Netns != "" {
		if !filepath.IsAbs(r.Netns) {
			return fmt.Errorf("netns %q is not an absolute path", bounded(r.Netns))
		}
		if len(r.Netns) > maxNetns || !printable(r.Netns) {
			return fmt.Errorf("netns: at most %d printable characters", maxNetns)
		}
	}
	if len(r.IfName) > maxIfName || !printable(r.IfName) || strings.ContainsAny(r.IfName, "/ ") {
		return fmt.Errorf("if_name %q is not an interface name", bounded(r.IfName))
	}
	if err := checkDNS("pod.namespace", r.Pod.Namespace, maxNamespace, false); err != nil {
		return err
	}
	if err := checkDNS("pod.name", r.Pod.Name, maxName, true); err != nil {
		return err
	}
	if len(r.Pod.UID) > maxUID || !printable(r.Pod.UID) || strings.ContainsAny(r.Pod.UID, "/ ") {
		return fmt.Errorf("pod.uid: at most %d printable characters, no '/' or space", maxUID)
	}
	if len(r.IPs) > maxIPs {
		return fmt.Errorf("ips: %d addresses (at most %d)", len(r.IPs), maxIPs)
	}
	for _, ip := range r.IPs {
		if _, err := netip.ParsePrefix(ip); err != nil {
			return fmt.Errorf("ips: %q is not an address in CIDR form", bounded(ip))
		}
	}
	return nil
}

// checkDNS accepts what Kubernetes accepts for namespace (a DNS label) and pod names (a DNS
// subdomain): lower-case letters, digits, '-' (and '.' in a subdomain), alphanumeric at both ends.
func checkDNS(field, s string, max int, dots bool) error {
	if s == "" {
		return fmt.Errorf("%s is empty", field)
	}
	if len(s) > max {
		return fmt.Errorf("%s: longer than %d characters", field, max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if alnum || c == '-' && i > 0 && i < len(s)-1 || dots && c == '.' && i > 0 && i < len(s)-1 {
			continue
		}
		return fmt.Errorf("%s %q: lower-case letters, digits and '-'%s only, alphanumeric at both ends", field, bounded(s), map[bool]string{true: ", '.'"}[dots])
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return false
		}
	}
	return true
}

// bounded keeps an error message short whatever the peer sent.
func bounded(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// DecodeRequest decodes one request line (the trailing newline optional) strictly: one JSON
// object, no unknown field, nothing after it, at most MaxMessageBytes; then Validate.
func DecodeRequest(line []byte) (Request, error) {
	var req Request
	if len(line) > MaxMessageBytes {
		return req, fmt.Errorf("request larger than %d bytes", MaxMessageBytes)
	}
	if err := decodeStrict(line, &req); err != nil {
		return Request{}, fmt.Errorf("decode request: %w", err)
	}
	if len(req.IPs) == 0 {
		req.IPs = nil // "ips":[] and no ips are one request
	}
	if err := req.Validate(); err != nil {
		return Request{}, fmt.Errorf("invalid request: %w", err)
	}
	return req, nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// encodeLine is v as one JSON line.
func encodeLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
