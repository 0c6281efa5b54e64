package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Load reads, parses, applies overrides and defaults, and validates. The
// returned error is an Errors value (use errors.As) for content problems, or
// a wrapped os error for I/O problems.
func Load(path string, o Overrides) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data, o)
}

// Parse is Load for bytes already read; name is used as File in errors.
func Parse(name string, data []byte, o Overrides) (*Config, error) {
	c, errs := parse(name, data, o)
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// LoadPartial is Load that also returns what it could decode when the file has problems, so that
// the next stages (compiling the rules' CEL, the file checks) can report their problems in the
// same pass: the configuration with defaults applied, in which a rule with any reported problem
// is left out of its rule set (its CEL would only repeat or hide that problem). With no problem,
// errs is nil and cfg is what Load returns. err is an I/O error reading the file.
func LoadPartial(path string, o Overrides) (cfg *Config, errs Errors, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config: %w", err)
	}
	return ParsePartial(path, data, o)
}

// ParsePartial is LoadPartial for bytes already read.
func ParsePartial(name string, data []byte, o Overrides) (*Config, Errors, error) {
	c, errs := parse(name, data, o)
	if len(errs) == 0 {
		return c, nil, nil
	}
	c.Path = name
	for set, rules := range c.RuleSets {
		var keep []Rule
		for i, r := range rules {
			key := fmt.Sprintf("%s[%d]", join("rule_sets", segment(set)), i)
			if !slices.ContainsFunc(errs, func(e *Error) bool {
				return e.Key == key || strings.HasPrefix(e.Key, key+".") || strings.HasPrefix(e.Key, key+"[")
			}) {
				keep = append(keep, r)
			}
		}
		c.RuleSets[set] = keep
	}
	return c, errs, nil
}

func parse(name string, data []byte, o Overrides) (*Config, Errors) {
	d := &decoder{
		file: name,
		src:  data,
		vals: map[string]*yaml.Node{},
		keys: map[string]*yaml.Node{},
		set:  map[string]bool{},
		bad:  map[string]bool{},
	}
	c := &Config{}
	d.root = d.document(data)
	if d.root != nil {
		d.mapping(d.root, "", configTable.fields(d, c, ""))
	}
	// The override lands before defaulting because the listen addresses
	// depend on the mechanism that will actually run.
	if o.Mechanism != "" {
		c.Mechanism = o.Mechanism
		d.set["mechanism"] = true
		if msg := checkMechanism(o.Mechanism); msg != "" {
			d.errs = append(d.errs, &Error{File: "--mechanism", Msg: msg})
		}
	}
	if o.Exec && o.Mechanism == "" && !d.set["mechanism"] {
		c.Mechanism = EBPF
		d.set["mechanism"] = true
	}
	applyDefaults(c, func(key string) bool { return d.set[key] })
	if name != "" {
		c.resolvePaths(filepath.Dir(name))
	}
	if d.root != nil {
		for _, e := range c.validate() {
			if (o.Mechanism != "" && e.Key == "mechanism") || d.suppressed(e) {
				continue
			}
			if o.Exec && e.Key == "ebpf.cgroup" && c.EBPF.Cgroup == "" {
				continue // exec's cgroup is its own
			}
			if o.Mechanism != "" && e.alt == "mechanism" {
				// The file's mechanism line is not the one in effect.
				e.alt = ""
			}
			e.File = name
			e.Line, e.Column = d.locate(e.Key, e.alt)
			d.errs = append(d.errs, e)
		}
	}
	if len(d.errs) > 0 {
		return c, d.errs.sorted()
	}
	c.Path = name
	return c, nil
}

// decoder walks the node tree by hand instead of using yaml's struct
// decoding, which stops at the first problem, cannot name the key path, and
// cannot tell an absent key from an explicit zero.
type decoder struct {
	file  string
	src   []byte
	lines []string // src split the way YAML counts lines, on first use
	runes map[int][]rune
	// textPosOf caches textPos per node.
	textPosOf map[*yaml.Node]Pos
	errs      Errors
	root      *yaml.Node
	vals      map[string]*yaml.Node // key path -> value node, to place validation errors
	keys      map[string]*yaml.Node // key path -> key node, to place errors about missing children
	set       map[string]bool       // key paths given a usable value; the rest get defaults
	bad       map[string]bool       // key paths already reported, so validation does not repeat them
	// badAbove holds every parent of a key in bad; suppressed builds it
	// once decoding is done.
	badAbove map[string]bool
	// entries counts list items and rule sets decoded, aliases counted at
	// each use, against maxEntries.
	entries int
}

// maxEntries bounds the work and memory a file can demand. Without it a few
// hundred kilobytes of aliases (a list of N aliases to a list of N rules)
// would expand to N² rules.
const maxEntries = 100000

func (d *decoder) fail(n *yaml.Node, key, msg string) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Column: n.Column, Key: key, Msg: msg})
}

// decodeNode keeps a panic inside the YAML library from taking down `check`
// or a reload; it becomes an ordinary error about the file.
func decodeNode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: parser failed: %v", r)
		}
	}()
	return dec.Decode(n)
}

const emptyMsg = "the file is empty; it needs at least intercept.destinations and intercept.ports"

// document returns the top-level mapping, or nil after reporting why there
// is none.
func (d *decoder) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := decodeNode(dec, &doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errs = append(d.errs, &Error{File: d.file, Msg: emptyMsg})
		} else {
			d.syntax(err, data)
		}
		return nil
	}
	// A plain decode ignores everything after the first document; someone
	// who split the file with "---" would lose half of it without a word.
	var extra yaml.Node
	switch err := decodeNode(dec, &extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		d.syntax(err, data)
	default:
		if n := docRoot(&extra); n != nil && !isNull(n) {
			d.fail(n, "", "a config file holds one YAML document; remove the \"---\" and everything after it or merge the documents")
		}
	}
	root := docRoot(&doc)
	if root == nil || isNull(root) {
		d.errs = append(d.errs, &Error{File: d.file, Msg: emptyMsg})
		return nil
	}
	if root.Kind != yaml.MappingNode {
		d.fail(root, "", "the top level must be a mapping of keys ("+fieldNames(configTable.fields(d, &Config{}, ""))+"), got "+describe(root))
		return nil
	}
	return root
}

func docRoot(doc *yaml.Node) *yaml.Node {
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		return deref(doc.Content[0])
	}
	return nil
}

// deref follows aliases to their anchored node. An alias never points at
// another alias, but the bound costs nothing and rules out a loop.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; i < 8 && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// A field decodes one key's value, reporting its own problems, and says
// whether the value was usable.
type field struct {
	name   string
	decode func(v *yaml.Node, key string) bool
}

func fieldNames(fields []field) string {
	s := make([]string, len(fields))
	for i, f := range fields {
		s[i] = f.name
	}
	return strings.Join(s, ", ")
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// segment quotes a key name that could not be read back from a dotted path
// (or would break the one-error-per-line output); schema names never need it.
func segment(name string) string {
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return quote(name)
		}
	}
	if name == "" {
		return `""`
	}
	return name
}

func (d *decoder) mapping(n *yaml.Node, path string, fields []field) bool {
	return d.mappingRefusing(n, path, fields, nil)
}

// mappingRefusing is mapping for a section that refuses some keys with a
// message of their own (refused maps the key to it) instead of calling them
// unknown; they are not listed among the valid keys.
func (d *decoder) mappingRefusing(n *yaml.Node, path string, fields []field, refused map[string]string) bool {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got "+describe(n))
		return false
	}
	d.pairs(n, path, func(kn, vn *yaml.Node, key string) {
		var f *field
		for j := range fields {
			if fields[j].name == kn.Value {
				f = &fields[j]
				break
			}
		}
		if msg, ok := refused[kn.Value]; f == nil && ok {
			d.fail(kn, key, msg)
			return
		}
		if f == nil {
			d.fail(kn, key, fmt.Sprintf("unknown key %s (valid: %s)", quote(kn.Value), fieldNames(fields)))
			return
		}
		d.keys[key], d.vals[key] = kn, vn
		if isNull(vn) {
			// "key:" with nothing after it reads as "use the default".
			return
		}
		if f.decode(vn, key) {
			d.set[key] = true
		} else {
			d.bad[key] = true
		}
	})
	return true
}

// pairs calls each for every key of mapping n that is a plain, first-seen
// name, reporting the others; key is the dotted path of the pair.
func (d *decoder) pairs(n *yaml.Node, path string, each func(kn, vn *yaml.Node, key string)) {
	first := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := deref(n.Content[i]), deref(n.Content[i+1])
		if kn.Kind != yaml.ScalarNode {
			d.fail(kn, path, "keys must be plain names, got "+describe(kn))
			continue
		}
		if kn.ShortTag() == "!!merge" {
			d.fail(kn, path, "merge keys (<<) are not supported; write the keys out")
			continue
		}
		key := join(path, segment(kn.Value))
		if prev, dup := first[kn.Value]; dup {
			d.fail(kn, key, fmt.Sprintf("duplicate key %s (first at line %d)", quote(kn.Value), prev.Line))
			continue
		}
		first[kn.Value] = kn
		each(kn, vn, key)
	}
}

// count charges n entries against maxEntries, reporting the first overrun
// only: one message says what is wrong, the rest would be noise.
func (d *decoder) count(v *yaml.Node, key string, n int) bool {
	over := d.entries > maxEntries
	d.entries += n
	if d.entries <= maxEntries {
		return true
	}
	if !over {
		d.fail(v, key, fmt.Sprintf("the file has more than %d list entries and rule sets (each use of an alias counts again); use fewer aliases or split the configuration", maxEntries))
	}
	return false
}

// entries decodes a list of mappings (routes, rules). Unlike list it keeps
// every entry, usable or not, so that the others are still validated and
// indexes match the file; Parse returns no config when any entry failed.
func entries[T any](d *decoder, v *yaml.Node, key, what string, schema table[T], at func(*T, *yaml.Node)) ([]T, bool) {
	return entriesWith(d, v, key, what, schema, at, d.mapping)
}

// entriesWith is entries with each entry's mapping decoded by mapping (d.mapping, or
// d.mappingSuggesting for a "did you mean" on unknown keys).
func entriesWith[T any](d *decoder, v *yaml.Node, key, what string, schema table[T], at func(*T, *yaml.Node), mapping func(*yaml.Node, string, []field) bool) ([]T, bool) {
	if v.Kind != yaml.SequenceNode {
		d.fail(v, key, "expected a list of "+what+", got "+describe(v))
		return nil, false
	}
	if !d.count(v, key, len(v.Content)) {
		return nil, false
	}
	if len(v.Content) == 0 {
		return nil, true
	}
	out := make([]T, len(v.Content))
	for i, it := range v.Content {
		it = deref(it)
		k := fmt.Sprintf("%s[%d]", key, i)
		d.keys[k], d.vals[k] = it, it
		at(&out[i], it)
		if !mapping(it, k, schema.fields(d, &out[i], "")) {
			d.bad[k] = true
		}
	}
	return out, true
}

func parseRate(n *yaml.Node) (float64, string) {
	var r float64
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		i, msg := parseInt(n)
		if msg != "" {
			return 0, msg
		}
		r = float64(i)
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float":
		if err := n.Decode(&r); err != nil {
			return 0, fmt.Sprintf("invalid number %s", quote(n.Value))
		}
	default:
		return 0, "expected a number of tokens per second such as 10 or 0.5, got " + describe(n)
	}
	return r, checkRate(r)
}

// parseDNSListen accepts "10.0.0.1:53", "[fd00::1]:53", or a bare address
// (port 53).
func parseDNSListen(n *yaml.Node) (netip.AddrPort, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return netip.AddrPort{}, "expected an address such as 10.0.0.1:53 or \"[fd00::1]:53\", got " + describe(n) + ipv6Hint(n)
	}
	s := strings.TrimSpace(n.Value)
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.AddrPort{}, fmt.Sprintf("%s: an address with a zone is not supported", quote(n.Value))
		}
		return netip.AddrPortFrom(a, 53), ""
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Sprintf("invalid address %s: expected ADDRESS or ADDRESS:PORT, IPv6 in brackets", quote(n.Value))
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Sprintf("%s: port must be between 1 and 65535", quote(n.Value))
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), ""
}

func parseString(n *yaml.Node) (string, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", "expected a string, got " + describe(n)
	}
	return n.Value, ""
}

// parseSNI lower-cases ASCII only: strings.ToLower would turn the Kelvin
// sign into "k" and so accept a name no client can send.
func parseSNI(n *yaml.Node) (string, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", "expected a server name such as api.example.com or *.example.com, got " + describe(n)
	}
	b := []byte(n.Value)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	s := string(b)
	return s, checkSNI(s)
}

// parseRedactPath takes a JSON path such as $.result.content[*].text; the policy package
// compiles it (and reports a bad one with the rule's position).
func parseRedactPath(n *yaml.Node) (string, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", "expected a JSON path such as $.result.content[*].text or $..password, got " + describe(n)
	}
	if !strings.HasPrefix(n.Value, "$") {
		return "", "a JSON path starts with $ (the JSON-RPC message), e.g. $.params.arguments.token"
	}
	return n.Value, ""
}

// parseRedactPattern takes a regular expression (RE2 syntax).
func parseRedactPattern(n *yaml.Node) (string, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", "expected a regular expression (RE2), got " + describe(n)
	}
	re, err := regexp.Compile(n.Value)
	if err != nil {
		return "", "not a regular expression (RE2): " + err.Error()
	}
	if re.MatchString("") {
		return "", "the pattern matches the empty string, so it would mark every string"
	}
	return n.Value, ""
}

// parseUpgrade lower-cases ASCII only, for the reason parseSNI gives.
func parseUpgrade(n *yaml.Node) (string, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", "expected a protocol name such as websocket, got " + describe(n)
	}
	b := []byte(n.Value)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	s := string(b)
	return s, checkUpgrade(s)
}

// resolvePaths makes relative file paths relative to dir, the directory of
// the config file.
func (c *Config) resolvePaths(dir string) {
	resolve := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	c.CA.Dir = resolve(c.CA.Dir)
	c.DNS.StateDir = resolve(c.DNS.StateDir)
	c.Audit.Dir = resolve(c.Audit.Dir)
	c.ToolIntegrity.Dir = resolve(c.ToolIntegrity.Dir)
	c.ToolIntegrity.PinFile = resolve(c.ToolIntegrity.PinFile)
	c.Telemetry.OTLP.CAFile = resolve(c.Telemetry.OTLP.CAFile)
	c.NodeAgent.StateDir = resolve(c.NodeAgent.StateDir)
	c.NodeAgent.PodsDir = resolve(c.NodeAgent.PodsDir)
	c.NodeAgent.Kubeconfig = resolve(c.NodeAgent.Kubeconfig)
	for i := range c.Tokens.Issuers {
		c.Tokens.Issuers[i].JWKSFile = resolve(c.Tokens.Issuers[i].JWKSFile)
	}
	c.Tokens.Introspection.ClientSecretFile = resolve(c.Tokens.Introspection.ClientSecretFile)
	for i, p := range c.Upstream.ExtraCAs {
		c.Upstream.ExtraCAs[i] = resolve(p)
	}
}

// 015001 is octal in YAML 1.1, which yaml.v3 still honours; a port written
// that way would silently become 6657.
var leadingZero = regexp.MustCompile(`^[-+]?0[0-9_]+$`)

func parseInt(n *yaml.Node) (int64, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, "expected an integer, got " + describe(n)
	}
	if leadingZero.MatchString(n.Value) {
		return 0, fmt.Sprintf("%s has a leading zero, which YAML reads as octal; remove the zero (or write 0o… for octal)", quote(n.Value))
	}
	var i int64
	if err := n.Decode(&i); err != nil {
		var u uint64
		if n.Decode(&u) == nil {
			return 0, fmt.Sprintf("%s is out of range", n.Value)
		}
		return 0, fmt.Sprintf("invalid integer %s", quote(n.Value))
	}
	return i, ""
}

// sizeUnits are the units parseSize accepts, binary multiples only: "MB" is refused rather than
// guessed at.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}}

func parseSize(n *yaml.Node) (int64, string) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		return parseInt(n)
	}
	bad := func() (int64, string) {
		return 0, fmt.Sprintf(`invalid size %s: write bytes, or a whole number with KiB, MiB, GiB or TiB, e.g. "100MiB"`, quote(n.Value))
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return 0, `expected a size such as "100MiB", got ` + describe(n)
	}
	s := strings.TrimSpace(n.Value)
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		num = strings.TrimSpace(num)
		if num == "" || strings.Trim(num, "0123456789") != "" || len(num) > 1 && num[0] == '0' {
			return bad()
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil || v > math.MaxInt64/u.mult {
			return 0, fmt.Sprintf("%s is out of range", quote(n.Value))
		}
		return v * u.mult, ""
	}
	return bad()
}

func parseDuration(n *yaml.Node) (time.Duration, string) {
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!str", "!!int", "!!float":
			d, err := time.ParseDuration(strings.TrimSpace(n.Value))
			if err != nil {
				return 0, fmt.Sprintf(`invalid duration %s: write a number with a unit, e.g. "5s" or "1m30s"`, quote(n.Value))
			}
			return d, ""
		}
	}
	return 0, `expected a duration such as "5s", got ` + describe(n)
}

func parseAddr(n *yaml.Node) (netip.Addr, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return netip.Addr{}, "expected an IP address, got " + describe(n) + ipv6Hint(n)
	}
	a, err := netip.ParseAddr(strings.TrimSpace(n.Value))
	if err != nil {
		return netip.Addr{}, fmt.Sprintf("invalid IP address %s", quote(n.Value))
	}
	return a, ""
}

// parsePrefix accepts a bare address as a single host and masks host bits,
// since "10.0.0.1/8" almost always means the network that contains it.
func parsePrefix(n *yaml.Node) (netip.Prefix, string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return netip.Prefix{}, "expected a prefix such as 10.0.0.0/8, got " + describe(n) + ipv6Hint(n)
	}
	s := strings.TrimSpace(n.Value)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Sprintf("invalid prefix %s: expected an address with a length, such as 10.0.0.0/8 or fd00::/64", quote(n.Value))
		}
		return p.Masked(), ""
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Sprintf("invalid prefix %s: expected an address with a length, such as 10.0.0.0/8 or fd00::/64", quote(n.Value))
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Sprintf("%s: a destination cannot carry a zone", quote(n.Value))
	}
	return netip.PrefixFrom(a, a.BitLen()), ""
}

// ipv6Hint explains the usual way an address turns into a mapping: YAML reads
// an unquoted "::" or "fd00::/8:" as a key.
func ipv6Hint(n *yaml.Node) string {
	if n.Kind == yaml.MappingNode {
		return ` (quote IPv6 addresses, e.g. "::")`
	}
	return ""
}

// parsePortRange accepts 8080 or "3000-3010". A range has to be a string
// because YAML has no range type.
func parsePortRange(n *yaml.Node) (PortRange, string) {
	const want = `expected a port such as 8080 or a range such as "3000-3010", got `
	if n.Kind != yaml.ScalarNode {
		return PortRange{}, want + describe(n)
	}
	var r PortRange
	switch n.ShortTag() {
	case "!!int":
		i, msg := parseInt(n)
		if msg == "" {
			msg = checkPort(i)
		}
		if msg != "" {
			return PortRange{}, msg
		}
		r = PortRange{uint16(i), uint16(i)}
	case "!!str":
		from, to, isRange := strings.Cut(n.Value, "-")
		if !isRange {
			to = from
		}
		f, okf := portNumber(from)
		t, okt := portNumber(to)
		if !okf || !okt {
			return PortRange{}, want + describe(n)
		}
		if f < 1 || f > 65535 || t < 1 || t > 65535 {
			return PortRange{}, fmt.Sprintf("%s: ports must be between 1 and 65535", quote(n.Value))
		}
		r = PortRange{uint16(f), uint16(t)}
	default:
		return PortRange{}, want + describe(n)
	}
	return r, checkPortRange(r)
}

// portNumber accepts only decimal digits: signs, hex and underscores in a
// port range are more likely typos than intent.
func portNumber(s string) (int, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// describe names what the file held, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!str":
			return "string " + quote(n.Value)
		case "!!int":
			return "integer " + plain(n.Value)
		case "!!float":
			return "number " + plain(n.Value)
		case "!!bool":
			return "boolean " + plain(n.Value)
		case "!!null":
			return "an empty value"
		case "!!timestamp":
			return "timestamp " + plain(n.Value)
		default:
			return quote(tag) + " value " + quote(n.Value)
		}
	}
	return "nothing"
}

// plain shows a resolved scalar bare when that is unambiguous, else quoted.
func plain(s string) string {
	if len(s) > 40 || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r > '~' || r == '"' }) {
		return quote(s)
	}
	return s
}

// locate points a validation error at the value it is about or, when that
// key is absent from the file, at the nearest enclosing key that is present.
func (d *decoder) locate(key, alt string) (line, col int) {
	for _, k := range []string{key, alt} {
		if n := d.vals[k]; k != "" && n != nil {
			return n.Line, n.Column
		}
	}
	for k := parent(key); k != ""; k = parent(k) {
		if n := d.keys[k]; n != nil {
			return n.Line, n.Column
		}
	}
	return d.root.Line, d.root.Column
}

func parent(key string) string {
	if i := strings.LastIndexAny(key, ".["); i >= 0 {
		return key[:i]
	}
	return ""
}

// suppressed drops a validation error about a key that, or whose parent or
// child, already failed to decode: that value was replaced by its default
// and a second message would only mislead. It looks keys up rather than
// scanning d.bad, which a file with thousands of broken entries makes long.
func (d *decoder) suppressed(e *Error) bool {
	if d.badAbove == nil {
		d.badAbove = map[string]bool{}
		for b := range d.bad {
			for k := parent(b); k != "" && !d.badAbove[k]; k = parent(k) {
				d.badAbove[k] = true
			}
		}
	}
	for _, key := range []string{e.Key, e.alt} {
		if key == "" {
			continue
		}
		if d.badAbove[key] {
			return true // a child failed
		}
		for k := key; k != ""; k = parent(k) {
			if d.bad[k] {
				return true // the key or a parent failed
			}
		}
	}
	return false
}
