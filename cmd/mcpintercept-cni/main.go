// Command mcpintercept-cni is the chained CNI plugin of the mcpintercept node agent. Placed after
// the plugins that create a pod's interface and addresses (bridge, host-local, Cilium...), it
// tells the agent on its Unix socket about each pod's network namespace (ADD), its removal (DEL)
// and asks whether it is still intercepted (CHECK), and passes the previous plugin's result on
// unchanged. It never blocks a pod's start when the agent is down unless its configuration says
// "fail_closed": true; an ADD it could not deliver is spooled for the agent to enrol when it
// starts.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"mcpintercept/nodeagent/cniproto"
)

// version is set at build time (-X main.version=...), as for mcpintercept.
var version = "devel"

func main() {
	p := &plugin{stdout: os.Stdout, stderr: os.Stderr, send: cniproto.Send}
	skel.PluginMainFuncs(p.funcs(), supported, "mcpintercept-cni "+version+": tells the mcpintercept node agent about pods (chained CNI plugin)")
}
