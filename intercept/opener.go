package intercept

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Opener is a mechanism with resources to open before its steering is installed (the dns
// mechanism's VIP table and DNS sockets) and to close once it is removed. The appliance calls
// Open in New and Close when it releases everything else.
type Opener interface {
	Open(ctx context.Context, reg prometheus.Registerer, log *slog.Logger) error
	Close() error
}
