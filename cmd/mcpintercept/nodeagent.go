//go:build !nonodeagent

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"mcpintercept/appliance"
	"mcpintercept/config"
	"mcpintercept/nodeagent"
)

// cmdNodeAgent runs the Kubernetes node agent (package nodeagent) until SIGINT or SIGTERM;
// SIGHUP reloads routes and rule sets.
func cmdNodeAgent(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("node-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf commonFlags
	fs.StringVar(&cf.config, "config", "", "configuration file (YAML) with a node_agent section")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcpintercept node-agent: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if cf.config == "" {
		fmt.Fprintln(stderr, "mcpintercept node-agent: --config FILE is required")
		return exitUsage
	}
	if needsLinux("node-agent", stderr) {
		return exitRuntime
	}
	cfg, ok := loadConfig(&cf, stderr)
	if !ok || !preflight(cfg, stderr) {
		return exitUsage
	}
	log := appliance.NewLoggerFormat(cfg.Log.Level, cfg.Log.Format, stderr)
	// SIGINT and SIGTERM stop the agent; SIGHUP reloads routes and rule sets.
	d := appliance.NewDaemon()
	defer d.Stop()
	ctx := d.Ctx

	newApp := func(o appliance.Options) (*appliance.Appliance, error) { return appliance.New(ctx, cfg, o) }
	agent, err := nodeagent.New(ctx, nodeAgentSettings(cfg), newApp, nodeagent.Options{Log: log, Stdout: stdout})
	if err != nil {
		var ce *appliance.ConfigError
		if errors.As(err, &ce) {
			reportConfigError(stderr, err)
			return exitUsage
		}
		log.Error("stopped", "err", err)
		return exitRuntime
	}
	go d.OnReload(func() { agent.Reload() }) // logs what it did, or why it kept the running configuration
	if err := agent.Run(ctx); err != nil {
		log.Error("stopped", "err", err)
		return exitRuntime
	}
	return exitOK
}

// nodeAgentSettings is the node agent's share of cfg.
func nodeAgentSettings(cfg *config.Config) nodeagent.Settings {
	na := cfg.NodeAgent
	return nodeagent.Settings{Socket: na.Socket, SpoolDir: na.SpoolDir, StateDir: na.StateDir,
		PodsDir: na.PodsDir, Kubeconfig: na.Kubeconfig, NodeName: na.NodeName,
		Selector: nodeagent.SelectorOf(na.NamespaceLabel, na.PodAnnotation, na.AllowPodOptOut),
		Port:     na.Port, Failure: na.Failure, FailOpen: na.Failure == config.FailOpen, Heartbeat: na.Heartbeat.Duration,
		Steering: appliance.SteeringOptions(cfg), ConnectTimeout: cfg.Limits.ConnectTimeout.Duration,
		InboundPort: cfg.Inbound.ListenPort}
}
