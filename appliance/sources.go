package appliance

import (
	"errors"
	"net"
	"sync"

	"mcpintercept/engine"
	"mcpintercept/intercept/upstream"
)

// extraListeners are the listeners served beside the appliance's own (ServeSource): the node
// agent's, one per enrolled pod, opened inside that pod's network namespace.
type extraListeners struct {
	mu  sync.Mutex
	lns map[*net.TCPListener]struct{}
	wg  sync.WaitGroup
}

// ServeSource serves ln with flows from src — the Origin, the dialer and client.pod of a node
// agent's pod — in the appliance's engine (its routes, rules, limits, records and drain), until
// the returned stop is called or the appliance stops. Every dial of src.Dialer passes
// upstream_deny first, as the appliance's own do. The appliance closes ln on Stop; stop closes it
// and waits until its accept loop has returned (open flows go on and are drained by Stop).
// Call it after Start.
func (a *Appliance) ServeSource(ln *net.TCPListener, src engine.Source) (stop func(), err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped || !a.installed {
		return nil, errors.New("appliance not serving")
	}
	return a.serveSource(ln, src)
}

// serveSource is ServeSource under a.mu.
func (a *Appliance) serveSource(ln *net.TCPListener, src engine.Source) (stop func(), err error) {
	if src.Dialer == nil || src.Steering == nil {
		return nil, errors.New("appliance: a source needs steering and a dialer")
	}
	src.Dialer = &upstream.Dialer{Base: src.Dialer, Deny: upstream.NewDenyList("upstream_deny", a.cfg.UpstreamDeny...),
		Log: a.log.With("component", "dialer")}
	x := &a.extra
	x.mu.Lock()
	if x.lns == nil {
		x.lns = map[*net.TCPListener]struct{}{}
	}
	x.lns[ln] = struct{}{}
	x.mu.Unlock()
	done := make(chan struct{})
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		defer close(done)
		if err := a.eng.ServeWith(a.serveCtx, ln, &src); err != nil {
			a.log.Error("serve", "listener", ln.Addr().String(), "err", err)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			ln.Close()
			<-done
			x.mu.Lock()
			delete(x.lns, ln)
			x.mu.Unlock()
		})
	}, nil
}

// closeExtra closes every listener ServeSource serves and waits for their accept loops.
func (a *Appliance) closeExtra() {
	x := &a.extra
	x.mu.Lock()
	for ln := range x.lns {
		ln.Close()
	}
	x.mu.Unlock()
	x.wg.Wait()
}
