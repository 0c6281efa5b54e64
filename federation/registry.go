package federation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// Tool is one published entry of an aggregate generation.
type Tool struct {
	Name       string          // the aggregate name: <downstream-id>.<Original>
	Downstream string          // the configured downstream id
	Original   string          // the name the downstream lists
	Version    string          // the MCP version the downstream's catalog was read in
	Def        json.RawMessage // the downstream's definition with "name" replaced by Name
}

// Generation is one immutable published aggregate: built whole from the downstreams' catalogs,
// never changed after it is published, replaced whole by the next.
type Generation struct {
	N     uint64
	Tools []*Tool // sorted by Name
	// Downstreams lists the ids whose catalog is in this generation, sorted.
	Downstreams []string
	// Filtered counts tools the rule set denied to everyone at publication.
	Filtered int
	routes   map[string]*Tool
}

// Route is the exact route of name in g (nil: not published). The name is looked up whole, never
// split into a downstream id and a tool name.
func (g *Generation) Route(name string) *Tool {
	if g == nil {
		return nil
	}
	return g.routes[name]
}

// Catalog is one downstream's tools as its last successful refresh read them.
type Catalog struct {
	Downstream string
	Version    string // the MCP version discovery settled on
	Tools      []CatalogTool
	Bytes      int // bytes read for it (every response of the refresh)
}

// CatalogTool is one tool as the downstream lists it.
type CatalogTool struct {
	Name string
	Def  json.RawMessage // the whole definition object, as sent
}

// Rejection is a generation that was not published (the previous one stays).
type Rejection struct {
	Reason string // "collision" | "aggregate_limit" | "policy"
	Detail string
}

func (r *Rejection) Error() string { return "generation rejected: " + r.Reason + ": " + r.Detail }

// ErrClosed is the error of a call admitted after shutdown began.
var ErrClosed = errors.New("federation shutting down")

// Registry holds the published generation and the policy that filtered it. Publication takes the
// write lock; authorizing a call takes the read lock around the check that its prepared route's
// generation and policy are still current and the durable audit record, so that a route prepared
// against an older generation can never be authorized, while calls commit concurrently.
type Registry struct {
	mu      sync.RWMutex
	gen     *Generation
	rules   *policy.Set // nil: no rule set (allow)
	next    uint64
	closing bool
	active  sync.WaitGroup
}

// Current is the published generation (nil before the first publication).
func (r *Registry) Current() *Generation {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.gen
}

// Rules is the current rule set.
func (r *Registry) Rules() *policy.Set {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.rules
}

// Build makes a generation of catalogs (one per healthy downstream, any order) under rules: each
// tool named <id>.<name>, those every client would be denied left out, sorted by name. A
// collision or more than maxTools tools rejects the whole generation.
func Build(catalogs []*Catalog, rules *policy.Set, maxTools int) (*Generation, error) {
	g := &Generation{routes: map[string]*Tool{}}
	for _, c := range catalogs {
		g.Downstreams = append(g.Downstreams, c.Downstream)
		for _, t := range c.Tools {
			name := c.Downstream + "." + t.Name
			if prev, dup := g.routes[name]; dup {
				return nil, &Rejection{Reason: "collision", Detail: fmt.Sprintf("%q is listed by %s (as %q) and by %s (as %q)", name, prev.Downstream, prev.Original, c.Downstream, t.Name)}
			}
			if rules != nil && deniedToAll(rules, name, c.Downstream, t.Name) {
				g.Filtered++
				continue
			}
			def, err := renamed(t.Def, name)
			if err != nil {
				return nil, &Rejection{Reason: "malformed", Detail: fmt.Sprintf("%s tool %q: %v", c.Downstream, t.Name, err)}
			}
			tool := &Tool{Name: name, Downstream: c.Downstream, Original: t.Name, Version: c.Version, Def: def}
			g.routes[name] = tool
			g.Tools = append(g.Tools, tool)
			if len(g.Tools) > maxTools {
				return nil, &Rejection{Reason: "aggregate_limit", Detail: fmt.Sprintf("more than %d tools (aggregate_limits.tools)", maxTools)}
			}
		}
	}
	slices.SortFunc(g.Tools, func(a, b *Tool) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(g.Downstreams)
	return g, nil
}

// deniedToAll asks the rules about a call of the tool with nothing known of the client: a deny
// that holds then holds for everyone, so the tool is not published. A rule that reads a client
// field does not match here (the field is absent) and is judged per list and per call instead.
func deniedToAll(rules *policy.Set, name, ds, orig string) bool {
	d := rules.Evaluate(&policy.Input{Probe: true, Vars: policy.Vars{
		MCP:        &policy.Message{Method: mcp.MethodToolsCall, Name: name, Kind: "request", Direction: "client_to_server"},
		Downstream: &policy.Downstream{ID: ds, Tool: orig},
	}})
	return d.Action == policy.ActionDeny && len(d.Errors) == 0
}

// renamed is def with its top-level "name" member's value replaced by name (the rest as sent).
func renamed(def json.RawMessage, name string) (json.RawMessage, error) {
	at := mcp.MemberSpan(def, "name")
	if !at.Found {
		return nil, errors.New("definition has no name")
	}
	var b bytes.Buffer
	b.Grow(len(def) + len(name))
	b.Write(def[:at.ValStart])
	b.Write(mcp.Quote(name))
	b.Write(def[at.ValEnd:])
	return b.Bytes(), nil
}

// Publish makes g the current generation under rules (numbered next), unless the registry is
// shutting down. Calls prepared against the previous generation will not be authorized.
func (r *Registry) Publish(g *Generation, rules *policy.Set) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	g.N = r.next
	r.gen, r.rules = g, rules
	return g.N
}

// Prepared is a call's route as prepared against one generation and rule set.
type Prepared struct {
	Gen   *Generation
	Rules *policy.Set
	Tool  *Tool // nil: the name is not published in Gen
}

// Prepare looks name up in the current generation.
func (r *Registry) Prepare(name string) Prepared {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return Prepared{Gen: r.gen, Rules: r.rules, Tool: r.gen.Route(name)}
}

// errStale is Commit's answer when a publication came between Prepare and Commit.
var errStale = errors.New("aggregate generation or policy changed since the route was prepared")

// Commit runs record (the durable authorization record) while holding the registry's read lock,
// after checking that p's generation and rule set are still the published ones and that the
// registry is admitting calls: no publication can come between the check and the record. On
// success the call is admitted: its caller must call Done once its terminal audit path ended.
func (r *Registry) Commit(p Prepared, record func() error) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closing {
		return ErrClosed
	}
	if p.Gen != r.gen || p.Rules != r.rules {
		return errStale
	}
	if err := record(); err != nil {
		return err
	}
	r.active.Add(1)
	return nil
}

// Done ends an admitted call.
func (r *Registry) Done() { r.active.Done() }

// Admit counts a call that is not dispatched (refused before Commit) but still writes records,
// so that shutdown waits for it; false when the registry is closing.
func (r *Registry) Admit() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closing {
		return false
	}
	r.active.Add(1)
	return true
}

// Close stops admission; Wait then waits for every admitted call.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
}

// Wait waits for every admitted call's terminal path.
func (r *Registry) Wait() { r.active.Wait() }
