package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Registered registers c on reg (nil: c unregistered), or returns the collector already
// registered under its name: a stage built again (a second engine on one registry, a test) counts
// in the same series.
func Registered[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if err := reg.Register(c); errors.As(err, &are) {
		if prev, ok := are.ExistingCollector.(C); ok {
			return prev
		}
	}
	return c
}
