package intercept

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"mcpintercept/origin"
)

// Factory is one steering mechanism as the registry knows it: how to build it, how its
// listeners must be opened, what `declare` says about it and what `cleanup` removes for it.
type Factory struct {
	Name origin.Mechanism
	// New builds the mechanism; nothing is installed before Install.
	New func(o Options) (Mechanism, error)
	// Transparent reports whether the listeners need IP_TRANSPARENT: with TPROXY-style delivery
	// the accepted socket's local address is a foreign address (the original destination).
	// Nil means false.
	Transparent func(o Options) bool
	// Recovery says how the mechanism delivers the original destination to the engine (the
	// draft requires this statement; `declare` prints it).
	Recovery func(o Options) string
	// Variants are the options whose Recovery differs, for declaring the build; nil: one, the
	// zero Options.
	Variants []Options
	// Sweeps remove, without any state, everything the mechanism installs, so that they work
	// after a crash or SIGKILL. Mechanisms that share objects list the same Sweep.
	Sweeps []Sweep
}

// Sweep removes one kind of object a mechanism installs and reports a line per removed object.
// Its Name identifies it: `cleanup` runs each named sweep once however many mechanisms list it.
type Sweep struct {
	Name string
	Run  func(ctx context.Context) ([]string, error)
}

// factories are the registered mechanisms, in the order of origin.Mechanisms.
var factories []Factory

// register adds a mechanism; each mechanism's file calls it from init. A name that is not a
// contract name, or one registered twice, is a programming error.
func register(f Factory) {
	if !f.Name.Known() || f.New == nil || f.Recovery == nil {
		panic(fmt.Sprintf("intercept: bad factory %q", f.Name))
	}
	if _, ok := Lookup(f.Name); ok {
		panic(fmt.Sprintf("intercept: mechanism %q registered twice", f.Name))
	}
	factories = append(factories, f)
	order := origin.Mechanisms()
	slices.SortStableFunc(factories, func(a, b Factory) int {
		return slices.Index(order, a.Name) - slices.Index(order, b.Name)
	})
}

// Factories are the registered mechanisms in contract order.
func Factories() []Factory { return slices.Clone(factories) }

// Lookup returns the factory of the mechanism called name.
func Lookup(name origin.Mechanism) (Factory, bool) {
	for _, f := range factories {
		if f.Name == name {
			return f, true
		}
	}
	return Factory{}, false
}

func lookup(name origin.Mechanism) (Factory, error) {
	f, ok := Lookup(name)
	if !ok {
		return Factory{}, fmt.Errorf("mechanism %q is not available in this build", name)
	}
	return f, nil
}

// New returns the mechanism o selects.
func New(o Options) (Mechanism, error) {
	f, err := lookup(o.Mechanism)
	if err != nil {
		return nil, err
	}
	return f.New(o)
}

// Transparent reports whether the listeners of the mechanism o selects need IP_TRANSPARENT.
func Transparent(o Options) bool {
	f, ok := Lookup(o.Mechanism)
	return ok && f.Transparent != nil && f.Transparent(o)
}

// Recovery says how the mechanism o selects delivers the original destination to the engine.
func Recovery(o Options) string {
	f, ok := Lookup(o.Mechanism)
	if !ok {
		return "unknown"
	}
	return f.Recovery(o)
}

// Declared is one statement of `declare`: a mechanism and how it recovers the destination.
type Declared struct {
	Mechanism origin.Mechanism
	Recovery  string
}

// Declare lists every registered mechanism with each way it can recover the destination.
func Declare() []Declared {
	var out []Declared
	for _, f := range factories {
		variants := f.Variants
		if len(variants) == 0 {
			variants = []Options{{}}
		}
		for _, o := range variants {
			o.Mechanism = f.Name
			out = append(out, Declared{Mechanism: f.Name, Recovery: f.Recovery(o)})
		}
	}
	return out
}

// Cleanup removes everything any mcpintercept daemon could have installed in this network
// namespace — every registered mechanism's sweeps, each once — without needing its
// configuration, so it also works after SIGKILL. It is idempotent and returns a line per
// removed object.
func Cleanup(ctx context.Context) ([]string, error) {
	var sweeps []Sweep
	for _, f := range factories {
		for _, s := range f.Sweeps {
			if !slices.ContainsFunc(sweeps, func(x Sweep) bool { return x.Name == s.Name }) {
				sweeps = append(sweeps, s)
			}
		}
	}
	return runSweeps(ctx, sweeps)
}

// CleanupFor removes what mechanism name installs, so that a crashed instance's cleanup never
// takes another instance's steering with it (ebpf leaves alone what a live process holds). An
// unknown name gets the whole Cleanup: leaving steering behind is the worse mistake.
func CleanupFor(ctx context.Context, name origin.Mechanism) ([]string, error) {
	f, ok := Lookup(name)
	if !ok {
		return Cleanup(ctx)
	}
	return runSweeps(ctx, f.Sweeps)
}

func runSweeps(ctx context.Context, sweeps []Sweep) ([]string, error) {
	var removed []string
	var errs []error
	for _, s := range sweeps {
		r, err := s.Run(ctx)
		removed = append(removed, r...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}
