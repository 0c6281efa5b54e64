// Package telemetry owns what leaves the appliance about its flows: the records (one Recorder
// writes every one of them, to an ordered list of sinks, the JSON Lines flow/decision log being
// one), Prometheus metrics and the admin HTTP listener (/metrics, /healthz, /readyz,
// /declaration). Nothing here may block the data path: the flow log is a bounded queue whose
// overflow is counted.
package telemetry
