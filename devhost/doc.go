// Package devhost is the dev-host mode of `mcpintercept exec -- CMD`: it runs one command in a
// cgroup of its own whose TCP connects eBPF steers to an appliance (package appliance) on
// ephemeral loopback listeners, as the user who ran sudo, trusting the appliance CA, and prints a
// live line per request and a summary. Linux only; elsewhere Run and ResolveUser return
// appliance.ErrNeedsLinux.
package devhost
