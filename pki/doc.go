// Package pki creates, loads and exports the appliance CA and mints short-lived per-name leaf
// certificates with a bounded cache. It knows nothing about connections.
package pki
