package config

import (
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Validate checks c as it is, without applying defaults, so a config built in
// code is held to the same rules as a loaded one. The error is an Errors
// value; Line is 0 because there is no file to point into.
func (c *Config) Validate() error {
	errs := c.validate()
	if len(errs) == 0 {
		return nil
	}
	for _, e := range errs {
		e.File = c.Path
	}
	return errs.sorted()
}

type validator struct{ errs Errors }

func (v *validator) check(key, msg string) {
	v.checkAlt(key, "", msg)
}

func (v *validator) checkAlt(key, alt, msg string) {
	if msg != "" {
		v.errs = append(v.errs, &Error{Key: key, Msg: msg, alt: alt})
	}
}

// validate holds every rule that can be stated on typed values. Parse runs it
// too and only adds positions, so a rule cannot be enforced in one path and
// forgotten in the other.
func (c *Config) validate() Errors {
	var v validator
	v.check("mechanism", checkMechanism(c.Mechanism))

	v.check("listen.port", checkPort(int64(c.Listen.Port)))
	switch {
	case len(c.Listen.Addresses) > 0:
		for i, a := range c.Listen.Addresses {
			key := fmt.Sprintf("listen.addresses[%d]", i)
			if !a.IsValid() {
				v.check(key, "invalid address")
				continue
			}
			if j := slices.Index(c.Listen.Addresses[:i], a); j >= 0 {
				v.check(key, fmt.Sprintf("duplicate of listen.addresses[%d] (%s)", j, a))
			}
		}
	case c.Mechanism == External:
		v.check("listen.addresses", `required when mechanism is "external": the integration decides where flows arrive`)
	case c.Mechanism.Available():
		v.check("listen.addresses", "must not be empty")
	}

	if len(c.Intercept.Destinations) == 0 {
		v.check("intercept.destinations", "required: list the prefixes whose traffic is intercepted, e.g. [10.0.0.0/8]")
	}
	for i, p := range c.Intercept.Destinations {
		key := fmt.Sprintf("intercept.destinations[%d]", i)
		switch {
		case !p.IsValid():
			v.check(key, "invalid prefix")
		case p != p.Masked():
			v.check(key, fmt.Sprintf("%s has host bits set; write %s", p, p.Masked()))
		}
	}
	if len(c.Intercept.Ports) == 0 {
		v.check("intercept.ports", "required: list the ports to intercept, e.g. [80, 443, \"3000-3010\"]")
	}
	for i, p := range c.Intercept.Ports {
		v.check(fmt.Sprintf("intercept.ports[%d]", i), checkPortRange(p))
	}

	s := c.Steering
	v.check("steering.mark", checkMark(int64(s.Mark)))
	v.check("steering.bypass_mark", checkMark(int64(s.BypassMark)))
	if s.Mark != 0 && s.BypassMark != 0 {
		switch {
		case s.Mark == s.BypassMark:
			v.checkAlt("steering.bypass_mark", "steering.mark",
				fmt.Sprintf("must differ from steering.mark (both are %#x)", s.Mark))
		case s.Mark&s.BypassMark != 0:
			v.checkAlt("steering.bypass_mark", "steering.mark",
				fmt.Sprintf("%#x shares bits %#x with steering.mark %#x; the two marks must have no bits in common so neither can be mistaken for the other",
					s.BypassMark, s.Mark&s.BypassMark, s.Mark))
		}
	}
	v.check("steering.route_table", checkRouteTable(int64(s.RouteTable)))
	v.check("steering.rule_priority", checkRulePriority(int64(s.RulePriority)))

	v.check("external.original_dst", checkOriginalDst(c.External.OriginalDst))

	l := c.Limits
	v.check("limits.max_flows", checkCount(int64(l.MaxFlows)))
	v.check("limits.max_flows_per_client", checkCount(int64(l.MaxFlowsPerClient)))
	if l.MaxFlows >= 1 && l.MaxFlowsPerClient > l.MaxFlows {
		v.checkAlt("limits.max_flows_per_client", "limits.max_flows",
			fmt.Sprintf("%d exceeds limits.max_flows (%d)", l.MaxFlowsPerClient, l.MaxFlows))
	}
	v.check("limits.idle_timeout", checkPositive(l.IdleTimeout.Duration))
	v.check("limits.connect_timeout", checkPositive(l.ConnectTimeout.Duration))
	v.check("limits.drain_timeout", checkNonNegative(l.DrainTimeout.Duration))

	v.check("admin.listen", checkAdminListen(c.Admin.Listen))
	v.check("log.level", checkLogLevel(c.Log.Level))
	v.check("log.flows", checkLogFlows(c.Log.Flows))
	return v.errs
}

// The check functions return "" when the value is fine and the message
// otherwise. Parse calls the numeric ones while decoding, because a value
// that does not fit the Go field must be rejected before it is stored.

func mechanismNames() string {
	s := make([]string, len(Mechanisms))
	for i, m := range Mechanisms {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

func checkMechanism(m Mechanism) string {
	switch {
	case m == "":
		return "must not be empty (valid: " + mechanismNames() + ")"
	case !m.Known():
		return fmt.Sprintf("unknown mechanism %s (valid: %s)", quote(string(m)), mechanismNames())
	case !m.Available():
		return fmt.Sprintf("mechanism %q is not available in this build yet", m)
	}
	return ""
}

func between(v, lo, hi int64) string {
	if v < lo || v > hi {
		return fmt.Sprintf("must be between %d and %d, got %d", lo, hi, v)
	}
	return ""
}

func checkPort(v int64) string { return between(v, 1, math.MaxUint16) }

func checkPortRange(p PortRange) string {
	switch {
	case p.From == 0 || p.To == 0:
		return fmt.Sprintf("port %s: ports must be between 1 and 65535", p)
	case p.From > p.To:
		return fmt.Sprintf("range %s is backwards: the start must not exceed the end", p)
	}
	return ""
}

func checkMark(v int64) string {
	switch {
	case v == 0:
		// 0 is what every unmarked packet carries.
		return "must be non-zero"
	case v < 0 || v > math.MaxUint32:
		return fmt.Sprintf("must fit in 32 bits (1 to 0xffffffff), got %d", v)
	}
	return ""
}

func checkRouteTable(v int64) string {
	if msg := between(v, 1, math.MaxInt32); msg != "" {
		return msg
	}
	if v >= 253 && v <= 255 {
		return fmt.Sprintf("table %d is reserved by the kernel (253 default, 254 main, 255 local)", v)
	}
	return ""
}

func checkRulePriority(v int64) string {
	// 0, 32766 and 32767 hold the kernel's local, main and default rules.
	return between(v, 1, 32765)
}

func checkCount(v int64) string { return between(v, 1, math.MaxInt32) }

func checkPositive(d time.Duration) string {
	if d <= 0 {
		return fmt.Sprintf("must be greater than 0, got %s", d)
	}
	return ""
}

func checkNonNegative(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("must not be negative, got %s", d)
	}
	return ""
}

func checkOriginalDst(s string) string {
	if s != OriginalDstLocalAddress && s != OriginalDstSOOriginalDst {
		return fmt.Sprintf("unknown value %s (valid: %s, %s)", quote(s), OriginalDstLocalAddress, OriginalDstSOOriginalDst)
	}
	return ""
}

func checkAdminListen(s string) string {
	if s == Off {
		return ""
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf(`must be "off" or host:port, got %s`, quote(s))
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Sprintf("port %s must be a number between 1 and 65535", quote(port))
	}
	return ""
}

func checkLogLevel(s string) string {
	if !slices.Contains(LogLevels, s) {
		return fmt.Sprintf("unknown level %s (valid: %s)", quote(s), strings.Join(LogLevels, ", "))
	}
	return ""
}

func checkLogFlows(s string) string {
	switch {
	case s == "":
		return `must be "stdout", "off" or a file path`
	case strings.ContainsRune(s, 0):
		return "file path contains a NUL byte"
	}
	return ""
}

// quote keeps messages one line and short whatever the file contained.
func quote(s string) string {
	const max = 40
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "…"
	}
	return strconv.Quote(s)
}
