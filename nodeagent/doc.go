// Package nodeagent is `mcpintercept node-agent`: one process per Kubernetes node that intercepts
// the MCP traffic of every selected pod inside that pod's own network namespace, the way Istio
// ambient's in-pod redirection does, with no sidecar and no pod restart. It learns of pods from
// two sources — the chained CNI plugin mcpintercept-cni (ADD, DEL, CHECK over a Unix socket,
// package cniproto) and the pod list (the Kubernetes API, or a directory of Pod and Namespace
// objects) — and for each selected pod, on a locked OS thread inside the pod's network namespace,
// installs the nftables-tproxy steering (the intercept package's own code) and opens the
// transparent listener there; all pods' flows are then served by one appliance engine with the
// pod as the client's identity (client.pod.* in rules, "pod" in records). The node's own network
// is never touched.
package nodeagent
