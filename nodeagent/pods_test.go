package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"mcpintercept/config"
)

const podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: client-a
  namespace: agents
  uid: 1111-2222
  labels: {mcp-tier: trusted}
  annotations: {note: x}
spec:
  serviceAccountName: planner
  nodeName: node-1
  containers: [{name: c, image: busybox}]
`

func TestParseObject(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		pod, ns   bool
		wantErr   bool
	}{
		{"pod yaml", podYAML, true, false, false},
		{"pod json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"n"}}`, true, false, false},
		{"namespace", "apiVersion: v1\nkind: Namespace\nmetadata: {name: agents, labels: {mcpintercept.io/intercept: enabled}}\n", false, true, false},
		{"unknown field", "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: n}\nspec: {nodeNmae: x}\n", false, false, true},
		{"wrong kind", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", false, false, true},
		{"wrong version", "apiVersion: apps/v1\nkind: Pod\nmetadata: {name: p, namespace: n}\n", false, false, true},
		{"no namespace", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", false, false, true},
		{"not yaml", "{{{", false, false, true},
		{"empty", "", false, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod, ns, err := ParseObject([]byte(tt.src))
			if (err != nil) != tt.wantErr || (pod != nil) != tt.pod || (ns != nil) != tt.ns {
				t.Fatalf("pod %v ns %v err %v", pod, ns, err)
			}
		})
	}
	pod, _, _ := ParseObject([]byte(podYAML))
	if pod.UID != "1111-2222" || pod.ServiceAccount != "planner" || pod.Labels["mcp-tier"] != "trusted" || pod.NodeName != "node-1" {
		t.Fatalf("pod = %+v", pod)
	}
}

func TestSelector(t *testing.T) {
	sel := SelectorOf(config.DefaultNamespaceLabel, config.DefaultPodAnnotation, false)
	on := map[string]string{"mcpintercept.io/intercept": "enabled"}
	off := map[string]string{"mcpintercept.io/intercept": "no"}
	for _, tt := range []struct {
		name   string
		ann    map[string]string
		labels map[string]string
		want   bool
	}{
		{"namespace label", nil, on, true},
		{"namespace label other value", nil, off, false},
		{"no label", nil, nil, false},
		{"annotation enables", map[string]string{"mcpintercept.io/intercept": "enabled"}, nil, true},
		// The annotation is the workload owner's; the namespace label is the operator's. By default
		// a pod cannot take itself out of its namespace's interception.
		{"annotation disabled does not override the namespace label", map[string]string{"mcpintercept.io/intercept": "disabled"}, on, true},
		{"annotation disabled in a namespace not selected", map[string]string{"mcpintercept.io/intercept": "disabled"}, nil, false},
		{"annotation disabled, any case", map[string]string{"mcpintercept.io/intercept": "DISABLED"}, on, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, why := sel.Selected(&Pod{Namespace: "n", Name: "p", Annotations: tt.ann}, tt.labels); got != tt.want {
				t.Fatalf("Selected = %v (%s), want %v", got, why, tt.want)
			}
		})
	}
	optOut := SelectorOf(config.DefaultNamespaceLabel, config.DefaultPodAnnotation, true)
	for _, tt := range []struct {
		name   string
		ann    map[string]string
		labels map[string]string
		want   bool
	}{
		{"opt-out allowed: annotation disabled overrides the namespace label", map[string]string{"mcpintercept.io/intercept": "disabled"}, on, false},
		{"opt-out allowed: namespace label without annotation", nil, on, true},
		{"opt-out allowed: annotation enables", map[string]string{"mcpintercept.io/intercept": "enabled"}, nil, true},
		{"opt-out allowed: other annotation value", map[string]string{"mcpintercept.io/intercept": "maybe"}, on, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got, why := optOut.Selected(&Pod{Namespace: "n", Name: "p", Annotations: tt.ann}, tt.labels); got != tt.want {
				t.Fatalf("Selected = %v (%s), want %v", got, why, tt.want)
			}
		})
	}
	disabled := &Pod{Annotations: map[string]string{"mcpintercept.io/intercept": "Disabled"}}
	if !sel.OptOutIgnored(disabled) || optOut.OptOutIgnored(disabled) || sel.OptOutIgnored(&Pod{}) {
		t.Error("OptOutIgnored: want true only for a disabled pod without allow_pod_opt_out")
	}
	anyValue := SelectorOf("inspect", "a", false)
	if got, _ := anyValue.Selected(&Pod{}, map[string]string{"inspect": ""}); !got {
		t.Fatal("a key-only selector must match any value")
	}
}

func TestDirSource(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", podYAML)
	write("ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata: {name: agents, labels: {x: z}}\n")
	write("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: agents}\nbogus: 1\n")
	write("other-node.json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"o","namespace":"agents"},"spec":{"nodeName":"node-2"}}`)
	write("README.txt", "ignored")
	d := &DirSource{Dir: dir, Node: "node-1"}
	ctx := context.Background()
	p, err := d.Pod(ctx, "agents", "client-a")
	if err != nil || p.UID != "1111-2222" {
		t.Fatalf("Pod = %+v, %v", p, err)
	}
	if _, err := d.Pod(ctx, "agents", "o"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another node's pod: %v, want ErrNotFound", err)
	}
	if _, err := d.Pod(ctx, "agents", "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a broken file's pod: %v, want ErrNotFound", err)
	}
	if l, err := d.NamespaceLabels(ctx, "agents"); err != nil || l["x"] != "z" {
		t.Fatalf("NamespaceLabels = %v, %v", l, err)
	}
	pods, err := d.Pods(ctx)
	if len(pods) != 1 || err == nil {
		t.Fatalf("Pods = %v, %v: want the one good pod and the broken file reported", pods, err)
	}
}

func TestKubeSource(t *testing.T) {
	c := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents", Labels: map[string]string{"mcpintercept.io/intercept": "enabled"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "agents", UID: "u1", Labels: map[string]string{"k": "v"}},
			Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "sa"}},
	)
	k := &KubeSource{Client: c, Node: "node-1"}
	ctx := context.Background()
	p, err := k.Pod(ctx, "agents", "a")
	if err != nil || p.UID != "u1" || p.ServiceAccount != "sa" || p.Labels["k"] != "v" {
		t.Fatalf("Pod = %+v, %v", p, err)
	}
	if _, err := k.Pod(ctx, "agents", "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing pod: %v", err)
	}
	if l, err := k.NamespaceLabels(ctx, "agents"); err != nil || l["mcpintercept.io/intercept"] != "enabled" {
		t.Fatalf("NamespaceLabels = %v, %v", l, err)
	}
	if _, err := k.NamespaceLabels(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing namespace: %v", err)
	}
}

func TestState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if got, err := loadState(dir); err != nil || got != nil {
		t.Fatalf("no state: %v, %v", got, err)
	}
	in := []statePod{{Namespace: "b", Name: "2", Netns: "/var/run/netns/b"}, {Namespace: "a", Name: "1", UID: "u", Netns: "/var/run/netns/a"}}
	if err := saveState(dir, in); err != nil {
		t.Fatal(err)
	}
	got, err := loadState(dir)
	if err != nil || len(got) != 2 || got[0].Namespace != "a" || got[1].Netns != "/var/run/netns/b" {
		t.Fatalf("loadState = %+v, %v", got, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, stateFile)); st.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v, want 0600", st.Mode().Perm())
	}
	os.WriteFile(filepath.Join(dir, stateFile), []byte(`{"version":2}`), 0o600)
	if _, err := loadState(dir); err == nil {
		t.Fatal("version 2 accepted")
	}
}

func FuzzParseObject(f *testing.F) {
	f.Add([]byte(podYAML))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"n"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		pod, ns, err := ParseObject(b)
		if err == nil && (pod == nil) == (ns == nil) {
			t.Fatalf("no error but pod %v ns %v", pod, ns)
		}
		if pod != nil && (pod.Name == "" || pod.Namespace == "") {
			t.Fatalf("pod without name or namespace: %+v", pod)
		}
	})
}
