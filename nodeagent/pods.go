package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"mcpintercept/origin"
)

// Pod is what the agent needs of a Kubernetes pod.
type Pod struct {
	Namespace, Name, UID string
	ServiceAccount       string
	NodeName             string
	Labels, Annotations  map[string]string
	// IPs are the pod's addresses (status.podIPs): how an inbound flow's client pod is found.
	IPs []netip.Addr
}

// InboundPortsAnnotation on an enrolled pod lists its server ports ("3001,8080-8081") whose
// incoming connections are intercepted in the pod's network namespace (Sidecar mode).
const InboundPortsAnnotation = "mcpintercept.io/inbound-ports"

// InboundPorts parses p's InboundPortsAnnotation: none when it is absent or empty; an error for a
// malformed list (the pod is then served without inbound interception, and the agent says why).
func (p *Pod) InboundPorts() ([]origin.PortRange, error) {
	v := strings.TrimSpace(p.Annotations[InboundPortsAnnotation])
	if v == "" {
		return nil, nil
	}
	var out []origin.PortRange
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		lo, hi, isRange := strings.Cut(f, "-")
		from, err1 := strconv.ParseUint(lo, 10, 16)
		to := from
		var err2 error
		if isRange {
			to, err2 = strconv.ParseUint(hi, 10, 16)
		}
		if err1 != nil || err2 != nil || from == 0 || to < from {
			return nil, fmt.Errorf("annotation %s: %q is not a port or a range of ports (e.g. 3001,8080-8081)", InboundPortsAnnotation, f)
		}
		out = append(out, origin.PortRange{From: uint16(from), To: uint16(to)})
	}
	if len(out) > 64 {
		return nil, fmt.Errorf("annotation %s: %d ranges, at most 64", InboundPortsAnnotation, len(out))
	}
	return out, nil
}

// Key is namespace/name.
func (p *Pod) Key() string { return p.Namespace + "/" + p.Name }

// ErrNotFound is a pod or namespace the source does not have.
var ErrNotFound = errors.New("not found")

// Source is the pod list: the Kubernetes API, or a directory of objects.
type Source interface {
	// Pod returns the pod namespace/name (ErrNotFound when there is none).
	Pod(ctx context.Context, namespace, name string) (*Pod, error)
	// NamespaceLabels returns a namespace's labels (ErrNotFound when there is none).
	NamespaceLabels(ctx context.Context, namespace string) (map[string]string, error)
	// Pods lists this node's pods.
	Pods(ctx context.Context) ([]*Pod, error)
}

// Selector decides which pods are enrolled: node_agent.namespace_label on the pod's namespace,
// or node_agent.pod_annotation "enabled" on the pod. The annotation "disabled" leaves a pod of a
// selected namespace out only with node_agent.allow_pod_opt_out: the annotation is written by
// the workload owner, the namespace label by the operator, and a workload that could exempt
// itself from inspection would make the namespace label advisory.
type Selector struct {
	LabelKey, LabelValue string
	AnyValue             bool
	Annotation           string
	AllowOptOut          bool
}

// SelectorOf is the selector of node_agent.namespace_label (key=value, or a key alone: any
// value), node_agent.pod_annotation and node_agent.allow_pod_opt_out.
func SelectorOf(namespaceLabel, podAnnotation string, allowOptOut bool) Selector {
	k, v, ok := strings.Cut(namespaceLabel, "=")
	return Selector{LabelKey: k, LabelValue: v, AnyValue: !ok, Annotation: podAnnotation, AllowOptOut: allowOptOut}
}

// Selected reports whether p is enrolled, and why (for logs).
func (s Selector) Selected(p *Pod, nsLabels map[string]string) (bool, string) {
	ann := strings.ToLower(p.Annotations[s.Annotation])
	v, ok := nsLabels[s.LabelKey]
	nsSelected := ok && (s.AnyValue || v == s.LabelValue)
	switch {
	case ann == "disabled" && nsSelected && !s.AllowOptOut:
		// Opting in is harmless (more inspection); opting out is the operator's call.
		return true, "namespace label " + s.LabelKey + " (annotation " + s.Annotation + "=disabled ignored: node_agent.allow_pod_opt_out is false)"
	case ann == "disabled":
		return false, "annotation " + s.Annotation + "=disabled"
	case ann == "enabled":
		return true, "annotation " + s.Annotation + "=enabled"
	case nsSelected:
		return true, "namespace label " + s.LabelKey
	}
	return false, "neither namespace label " + s.LabelKey + " nor annotation " + s.Annotation
}

// OptOutIgnored reports whether p carries the annotation "disabled" that this selector does not
// honour (for the log; Selected decides).
func (s Selector) OptOutIgnored(p *Pod) bool {
	return !s.AllowOptOut && strings.EqualFold(p.Annotations[s.Annotation], "disabled")
}

// DirSource reads the pod list from a directory: one Kubernetes object per file (.yaml, .yml or
// .json), of kind Pod or Namespace. It is re-read on every question, so a file written before a
// pod's CNI ADD is seen by it.
type DirSource struct {
	Dir string
	// Node, when set, keeps only pods whose spec.nodeName is empty or equal.
	Node string
}

// maxObjectBytes bounds one object file.
const maxObjectBytes = 1 << 20

type dirObjects struct {
	pods       map[string]*Pod
	namespaces map[string]map[string]string
}

func (d *DirSource) read() (*dirObjects, error) {
	entries, err := os.ReadDir(d.Dir)
	if err != nil {
		return nil, fmt.Errorf("pods_dir: %w", err)
	}
	objs := &dirObjects{pods: map[string]*Pod{}, namespaces: map[string]map[string]string{}}
	var errs []error
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(d.Dir, e.Name())
		b, err := readBounded(path, maxObjectBytes)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pod, ns, err := ParseObject(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		switch {
		case pod != nil:
			if d.Node == "" || pod.NodeName == "" || pod.NodeName == d.Node {
				objs.pods[pod.Key()] = pod
			}
		case ns != nil:
			objs.namespaces[ns.Name] = ns.Labels
		}
	}
	// A broken file is reported, never fatal to the others.
	return objs, errors.Join(errs...)
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, over the %d-byte bound of an object", path, st.Size(), limit)
	}
	b := make([]byte, st.Size())
	_, err = f.ReadAt(b, 0)
	if err != nil && st.Size() > 0 {
		return nil, err
	}
	return b, nil
}

// Pod implements Source.
func (d *DirSource) Pod(_ context.Context, namespace, name string) (*Pod, error) {
	objs, err := d.read()
	if p, ok := objs.pods[namespace+"/"+name]; ok {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w (and %w)", namespace, name, ErrNotFound, err)
	}
	return nil, fmt.Errorf("pod %s/%s: %w in %s", namespace, name, ErrNotFound, d.Dir)
}

// NamespaceLabels implements Source.
func (d *DirSource) NamespaceLabels(_ context.Context, namespace string) (map[string]string, error) {
	objs, _ := d.read()
	if objs == nil {
		return nil, fmt.Errorf("namespace %s: %w", namespace, ErrNotFound)
	}
	l, ok := objs.namespaces[namespace]
	if !ok {
		return nil, fmt.Errorf("namespace %s: %w", namespace, ErrNotFound)
	}
	return l, nil
}

// Pods implements Source.
func (d *DirSource) Pods(context.Context) ([]*Pod, error) {
	objs, err := d.read()
	if objs == nil {
		return nil, err
	}
	out := make([]*Pod, 0, len(objs.pods))
	for _, p := range objs.pods {
		out = append(out, p)
	}
	return out, err
}

// ParseObject decodes one Kubernetes object, JSON or YAML, strictly (an unknown field is an
// error): a v1 Pod or a v1 Namespace.
func ParseObject(b []byte) (*Pod, *corev1.Namespace, error) {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(b, &head); err != nil {
		return nil, nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if head.APIVersion != "v1" {
		return nil, nil, fmt.Errorf("apiVersion %q: want v1", head.APIVersion)
	}
	switch head.Kind {
	case "Pod":
		var p corev1.Pod
		if err := yaml.UnmarshalStrict(b, &p); err != nil {
			return nil, nil, fmt.Errorf("pod: %w", err)
		}
		pod := PodOf(&p)
		if pod.Name == "" || pod.Namespace == "" {
			return nil, nil, errors.New("pod: metadata.name and metadata.namespace are required")
		}
		return pod, nil, nil
	case "Namespace":
		var ns corev1.Namespace
		if err := yaml.UnmarshalStrict(b, &ns); err != nil {
			return nil, nil, fmt.Errorf("namespace: %w", err)
		}
		if ns.Name == "" {
			return nil, nil, errors.New("namespace: metadata.name is required")
		}
		return nil, &ns, nil
	}
	return nil, nil, fmt.Errorf("kind %q: want Pod or Namespace", head.Kind)
}

// PodOf is the agent's view of a Kubernetes pod.
func PodOf(p *corev1.Pod) *Pod {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = p.Spec.DeprecatedServiceAccount
	}
	out := &Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), ServiceAccount: sa,
		NodeName: p.Spec.NodeName, Labels: maps.Clone(p.Labels), Annotations: maps.Clone(p.Annotations)}
	ips := []string{p.Status.PodIP}
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil && !slices.Contains(out.IPs, a.Unmap()) {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	return out
}
