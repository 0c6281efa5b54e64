package appliance

import (
	"mcpintercept/config"
	"mcpintercept/intercept"
	"mcpintercept/origin"
)

// SteeringOptions is the steering's share of cfg: the mechanism, what it steers and where to,
// its marks and routing table, and the settings of the mechanism in effect.
func SteeringOptions(cfg *config.Config) intercept.Options {
	o := intercept.Options{
		Mechanism:    origin.Mechanism(cfg.Mechanism),
		Listen:       cfg.Listen.Addresses,
		Port:         cfg.Listen.Port,
		Destinations: cfg.Intercept.Destinations,
		Local:        cfg.Intercept.LocalEnabled(),
		Mark:         cfg.Steering.Mark,
		BypassMark:   cfg.Steering.BypassMark,
		RouteTable:   cfg.Steering.RouteTable,
		RulePriority: cfg.Steering.RulePriority,
		NATed:        cfg.External.OriginalDst == config.OriginalDstSOOriginalDst,
		Cgroup:       cfg.EBPF.Cgroup,
		DNS:          dnsOptions(cfg),
	}
	for _, p := range cfg.Intercept.Ports {
		o.Ports = append(o.Ports, intercept.PortRange{From: p.From, To: p.To})
	}
	return o
}

func dnsOptions(cfg *config.Config) intercept.DNSOptions {
	d := cfg.DNS
	return intercept.DNSOptions{
		Listen: d.Listen, Names: d.Names, V4: d.Pools.V4, V6: d.Pools.V6,
		Upstream: d.Upstream, Clients: d.Clients, TTL: d.TTL.Duration,
		Hold: d.Hold.Duration, Quarantine: d.Quarantine.Duration, StateDir: d.StateDir,
		MaxNames: d.MaxNames, ClientQuota: d.ClientQuota, PatternQuota: d.PatternQuota,
		CacheSize: d.CacheSize, ClientRate: d.ClientRate, ClientBurst: d.ClientBurst,
		Timeout:     d.Timeout.Duration,
		PeekTimeout: cfg.TLS.PeekTimeout.Duration, MaxClientHello: cfg.TLS.MaxClientHello,
		VIPAssignment: d.VIPAssignment,
	}
}

// SteeringFromFile is NewSteering for the configuration file at path, with its mechanism
// replaced by mechanism (when not "") and intercept.local by local (when not nil): benchsteer's
// whole setup, so that only appliance and cmd read configuration files.
func SteeringFromFile(path, mechanism string, local *bool) (intercept.Mechanism, error) {
	cfg, err := config.Load(path, config.Overrides{Mechanism: config.Mechanism(mechanism)})
	if err != nil {
		return nil, err
	}
	if local != nil {
		cfg.Intercept.Local = local
	}
	return NewSteering(cfg)
}

// NewSteering builds the mechanism cfg selects without installing anything (benchsteer
// installs exactly what `run` would).
func NewSteering(cfg *config.Config) (intercept.Mechanism, error) {
	return intercept.New(SteeringOptions(cfg))
}
