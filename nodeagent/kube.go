package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeSource is the pod list from the Kubernetes API (client-go): the agent reads pods and
// namespaces (RBAC: get, list and watch on pods and namespaces, nothing else).
type KubeSource struct {
	Client kubernetes.Interface
	// Node keeps Pods to this node's pods (spec.nodeName).
	Node string
}

// NewKubeSource connects with kubeconfig, or in-cluster (the pod's service account) when it is
// "". node "" reads $NODE_NAME (the DaemonSet sets it from spec.nodeName).
func NewKubeSource(kubeconfig, node string) (*KubeSource, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			err = errors.New("not in a cluster (KUBERNETES_SERVICE_HOST unset): set node_agent.kubeconfig or node_agent.pods_dir")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cfg.Timeout = 10 * time.Second
	cfg.UserAgent = "mcpintercept-node-agent"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if node == "" {
		node = os.Getenv("NODE_NAME")
	}
	if node == "" {
		return nil, errors.New("kubernetes: this node's name is unknown: set node_agent.node_name or $NODE_NAME")
	}
	return &KubeSource{Client: c, Node: node}, nil
}

// Pod implements Source.
func (k *KubeSource) Pod(ctx context.Context, namespace, name string) (*Pod, error) {
	p, err := k.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	return PodOf(p), nil
}

// NamespaceLabels implements Source.
func (k *KubeSource) NamespaceLabels(ctx context.Context, namespace string) (map[string]string, error) {
	ns, err := k.Client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("namespace %s: %w", namespace, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", namespace, err)
	}
	return ns.Labels, nil
}

// Pods implements Source: this node's pods.
func (k *KubeSource) Pods(ctx context.Context) ([]*Pod, error) {
	list, err := k.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.Node).String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of node %s: %w", k.Node, err)
	}
	out := make([]*Pod, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.HostNetwork {
			continue // a host-network pod shares the node's namespace: never ours to steer
		}
		out = append(out, PodOf(&list.Items[i]))
	}
	return out, nil
}
