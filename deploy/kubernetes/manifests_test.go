// Package kubernetes_test checks the manifests: each decodes strictly into its Kubernetes type (a
// misspelt field fails), the DaemonSet asks for exactly the capabilities the agent needs, and the
// ConfigMap's configuration is one mcpintercept accepts.
package kubernetes_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"mcpintercept/config"
)

// objects decodes every document of every manifest strictly into its type.
func objects(t *testing.T) map[string]any {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s #%d: %v", f, i+1, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Namespace":
				obj = &corev1.Namespace{}
			case "v1 ServiceAccount":
				obj = &corev1.ServiceAccount{}
			case "v1 ConfigMap":
				obj = &corev1.ConfigMap{}
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "rbac.authorization.k8s.io/v1 ClusterRole":
				obj = &rbacv1.ClusterRole{}
			case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
				obj = &rbacv1.ClusterRoleBinding{}
			case "apps/v1 DaemonSet":
				obj = &appsv1.DaemonSet{}
			default:
				t.Fatalf("%s #%d: unexpected %s %s", f, i+1, tm.APIVersion, tm.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s #%d (%s): %v", f, i+1, tm.Kind, err)
			}
			name := tm.Kind + "/" + metaName(obj)
			if _, dup := out[name]; dup {
				t.Fatalf("%s defined twice", name)
			}
			out[name] = obj
		}
	}
	return out
}

func metaName(obj any) string {
	b, _ := json.Marshal(obj)
	var m struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	json.Unmarshal(b, &m)
	return m.Metadata.Name
}

func TestStrictDecodeCatchesMisspelling(t *testing.T) {
	// The check above is only worth something if a typo fails it.
	doc := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostNetwrok: true\n"
	if err := yaml.UnmarshalStrict([]byte(doc), &appsv1.DaemonSet{}); err == nil {
		t.Fatal("a misspelt field decoded")
	}
}

func TestManifests(t *testing.T) {
	objs := objects(t)
	for _, want := range []string{
		"Namespace/mcpintercept-system", "ServiceAccount/mcpintercept-node-agent", "ClusterRole/mcpintercept-node-agent",
		"ClusterRoleBinding/mcpintercept-node-agent", "ConfigMap/mcpintercept-config", "ConfigMap/mcpintercept-cni-install",
		"Secret/mcpintercept-ca", "DaemonSet/mcpintercept-node-agent",
	} {
		if objs[want] == nil {
			t.Errorf("missing %s", want)
		}
	}

	t.Run("rbac reads pods and namespaces only", func(t *testing.T) {
		cr := objs["ClusterRole/mcpintercept-node-agent"].(*rbacv1.ClusterRole)
		for _, r := range cr.Rules {
			for _, res := range r.Resources {
				if res != "pods" && res != "namespaces" || !slices.Equal(r.APIGroups, []string{""}) {
					t.Errorf("rule grants %v in %v", res, r.APIGroups)
				}
			}
			if v := slices.Sorted(slices.Values(r.Verbs)); !slices.Equal(v, []string{"get", "list", "watch"}) {
				t.Errorf("verbs %v, want get, list, watch", r.Verbs)
			}
		}
		crb := objs["ClusterRoleBinding/mcpintercept-node-agent"].(*rbacv1.ClusterRoleBinding)
		if crb.RoleRef.Name != cr.Name || len(crb.Subjects) != 1 || crb.Subjects[0].Name != "mcpintercept-node-agent" || crb.Subjects[0].Namespace != "mcpintercept-system" {
			t.Errorf("binding %+v", crb)
		}
	})

	ds := objs["DaemonSet/mcpintercept-node-agent"].(*appsv1.DaemonSet)
	spec := ds.Spec.Template.Spec
	t.Run("daemonset", func(t *testing.T) {
		if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" || spec.ServiceAccountName != "mcpintercept-node-agent" {
			t.Errorf("hostNetwork %v, priorityClassName %q, serviceAccountName %q", spec.HostNetwork, spec.PriorityClassName, spec.ServiceAccountName)
		}
		if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
			t.Errorf("tolerations %+v, want one that tolerates every taint", spec.Tolerations)
		}
		if len(spec.Containers) != 1 {
			t.Fatalf("%d containers", len(spec.Containers))
		}
		c := spec.Containers[0]
		sc := c.SecurityContext
		if sc == nil || sc.Capabilities == nil {
			t.Fatal("no securityContext capabilities")
		}
		if add := slices.Sorted(slices.Values(sc.Capabilities.Add)); !slices.Equal(add, []corev1.Capability{"NET_ADMIN", "SYS_ADMIN"}) {
			t.Errorf("capabilities add %v, want exactly NET_ADMIN and SYS_ADMIN", sc.Capabilities.Add)
		}
		if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("capabilities drop %v, want ALL", sc.Capabilities.Drop)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Error("privileged")
		}
		for _, ic := range spec.InitContainers {
			if ic.SecurityContext == nil || ic.SecurityContext.Privileged != nil && *ic.SecurityContext.Privileged || ic.SecurityContext.Capabilities == nil || len(ic.SecurityContext.Capabilities.Add) != 0 {
				t.Errorf("init container %s: %+v, want no added capability, not privileged", ic.Name, ic.SecurityContext)
			}
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = m
		}
		if m, ok := mounts["/var/run/netns"]; !ok || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
			t.Errorf("/var/run/netns mount %+v, want HostToContainer propagation", m)
		}
		for _, p := range []string{"/run/mcpintercept", "/var/lib/mcpintercept", "/etc/mcpintercept/config", "/etc/mcpintercept/ca/ca.pem", "/etc/mcpintercept/ca/ca-key.pem"} {
			if _, ok := mounts[p]; !ok {
				t.Errorf("no mount at %s", p)
			}
		}
		var nodeName bool
		for _, e := range c.Env {
			nodeName = nodeName || e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
		}
		if !nodeName {
			t.Error("no NODE_NAME from spec.nodeName")
		}
		p := c.ReadinessProbe
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Host != "127.0.0.1" || p.HTTPGet.Port.IntValue() != 9464 {
			t.Errorf("readinessProbe %+v, want GET http://127.0.0.1:9464/readyz", p)
		}
		vols := map[string]corev1.Volume{}
		for _, v := range spec.Volumes {
			vols[v.Name] = v
		}
		for _, cc := range append(spec.InitContainers, c) {
			for _, m := range cc.VolumeMounts {
				if _, ok := vols[m.Name]; !ok {
					t.Errorf("%s mounts undefined volume %s", cc.Name, m.Name)
				}
			}
		}
		for name, path := range map[string]string{"netns": "/var/run/netns", "cni-bin": "/opt/cni/bin", "cni-net": "/etc/cni/net.d"} {
			if v := vols[name]; v.HostPath == nil || v.HostPath.Path != path {
				t.Errorf("volume %s: %+v, want hostPath %s", name, v.VolumeSource, path)
			}
		}
	})

	t.Run("configmap config parses", func(t *testing.T) {
		cm := objs["ConfigMap/mcpintercept-config"].(*corev1.ConfigMap)
		cfg, err := config.Parse("configmap.yaml:config.yaml", []byte(cm.Data["config.yaml"]), config.Overrides{})
		if err != nil {
			t.Fatalf("the ConfigMap's config.yaml: %v", err)
		}
		na := cfg.NodeAgent
		if na.Socket != "/run/mcpintercept/cni.sock" || na.SpoolDir != "/run/mcpintercept/cni-spool" || na.Port != 15001 || na.Failure != config.FailOpen {
			t.Errorf("node_agent %+v", na)
		}
		if cfg.Admin.Listen != "127.0.0.1:9464" {
			t.Errorf("admin.listen %q, the readiness probe's is 127.0.0.1:9464", cfg.Admin.Listen)
		}
		if len(cfg.Routes) == 0 {
			t.Error("no routes")
		}
		// The DaemonSet mounts what the config names.
		if cfg.CA.Dir != "/etc/mcpintercept/ca" {
			t.Errorf("ca.dir %q, the DaemonSet mounts the CA at /etc/mcpintercept/ca", cfg.CA.Dir)
		}
		for _, p := range []string{na.Socket, na.SpoolDir} {
			if !strings.HasPrefix(p, "/run/mcpintercept/") {
				t.Errorf("%s is outside the /run/mcpintercept mount", p)
			}
		}
		if !strings.HasPrefix(na.StateDir, "/var/lib/mcpintercept/") {
			t.Errorf("state_dir %s is outside the /var/lib/mcpintercept mount", na.StateDir)
		}
	})

	t.Run("the chained entry is the snippet and the plugin's defaults", func(t *testing.T) {
		snippet, err := os.ReadFile("cni-conflist-snippet.json")
		if err != nil {
			t.Fatal(err)
		}
		var entry map[string]any
		dec := json.NewDecoder(bytes.NewReader(snippet))
		if err := dec.Decode(&entry); err != nil {
			t.Fatal(err)
		}
		if entry["type"] != "mcpintercept-cni" {
			t.Errorf("type %v", entry["type"])
		}
		cm := objs["ConfigMap/mcpintercept-cni-install"].(*corev1.ConfigMap)
		var inCM map[string]any
		if err := json.Unmarshal([]byte(cm.Data["entry.json"]), &inCM); err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(entry, inCM) {
			t.Errorf("entry.json in the ConfigMap %v differs from cni-conflist-snippet.json %v", inCM, entry)
		}
		cfg, _ := config.Parse("c", []byte(objs["ConfigMap/mcpintercept-config"].(*corev1.ConfigMap).Data["config.yaml"]), config.Overrides{})
		if cfg != nil && (entry["socket"] != cfg.NodeAgent.Socket || entry["spool_dir"] != cfg.NodeAgent.SpoolDir) {
			t.Errorf("plugin entry socket %v spool_dir %v, the agent's %s and %s", entry["socket"], entry["spool_dir"], cfg.NodeAgent.Socket, cfg.NodeAgent.SpoolDir)
		}
		if !strings.Contains(cm.Data["install-cni.sh"], "mcpintercept-cni") {
			t.Error("install-cni.sh does not install the plugin")
		}
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
