// Package config is the single place where an mcpintercept configuration
// file becomes a typed, defaulted and validated Config.
//
// Every other package trusts a *Config it is handed, so all checking happens
// here, and it happens against the YAML node tree rather than after a plain
// unmarshal: that is what lets each problem be reported with the file, line,
// column and dotted key the operator has to edit, and lets every problem in a
// file be reported in one pass instead of one per run of `check`.
//
// The package never touches the network: addresses are parsed, not resolved,
// and listen addresses are not probed. Whether a port can actually be bound is
// the listener's business.
package config
