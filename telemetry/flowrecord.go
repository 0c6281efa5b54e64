package telemetry

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// FlowRecord is one line of the flow/decision log: one per HTTP request, or one per connection for
// opaque and passthrough flows. Every key is always present so consumers see a stable schema;
// fields that do not apply to a record are empty (or 0).
type FlowRecord struct {
	Time       Time   `json:"time"`
	Flow       string `json:"flow"`
	Client     string `json:"client"`
	OrigDst    string `json:"orig_dst"`
	Mechanism  string `json:"mechanism"`
	SNI        string `json:"sni"`
	TLS        string `json:"tls"`
	Level      int    `json:"level"`
	HTTPMethod string `json:"http_method"`
	Path       string `json:"path"`
	Status     int    `json:"status"`
	MCPVersion string `json:"mcp_version"`
	MCPMethod  string `json:"mcp_method"`
	MCPName    string `json:"mcp_name"`
	// JSONRPCID and Direction are set on Level 2 records, one per JSON-RPC message: the id as
	// sent (a string id keeps its quotes) and client_to_server or server_to_client.
	JSONRPCID  string `json:"jsonrpc_id"`
	Direction  string `json:"direction"`
	Decision   string `json:"decision"`
	Rule       string `json:"rule"`
	Reason     string `json:"reason"`
	BytesUp    int64  `json:"bytes_up"`
	BytesDown  int64  `json:"bytes_down"`
	DurationMS int64  `json:"duration_ms"`
	// Iss and Sub are the caller named by the request's accepted bearer token (hashed under
	// tokens.record_identity: hash); absent when there was none or the route reads no token.
	Iss string `json:"iss,omitempty"`
	Sub string `json:"sub,omitempty"`
	// Credential is the credential a credentials route added to the request upstream: injected
	// or exchanged (on a request's own record, not on the server's messages); CredentialSource
	// the file or token endpoint it came from. Never the value.
	Credential       string `json:"credential,omitempty"`
	CredentialSource string `json:"credential_source,omitempty"`
	// TraceID and SpanID are the OpenTelemetry span the appliance made for this record's call
	// (Level 2: the JSON-RPC request's; Level 1: the HTTP request's; opaque and passthrough: the
	// connection's), in lower-case hex; absent when tracing is off or the record has no span.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
	// Process is the local process that opened the connection, when the steering mechanism knows
	// it (eBPF); absent otherwise.
	Process *Process `json:"process,omitempty"`
	// Pod is the Kubernetes pod the connection came from, when the node agent steered it;
	// absent otherwise. Its labels are policy's (client.pod.labels), not the record's.
	Pod *Pod `json:"pod,omitempty"`
	// Mode is the draft's mode of the flow when it is not Transparent: "Sidecar" for a flow
	// steered inbound to the co-located server. Absent for Transparent flows.
	Mode string `json:"mode,omitempty"`
	// Point is the draft's interceptor point the record was written at, on flows with a Mode:
	// pre-request (a client message judged before it is forwarded), pre-response (a server
	// message judged before it is delivered), post-response (the exchange's or the connection's
	// record, after delivery).
	Point string `json:"point,omitempty"`
}

// Interceptor points (the draft's Sidecar mode).
const (
	PointPreRequest   = "pre-request"
	PointPreResponse  = "pre-response"
	PointPostResponse = "post-response"
)

// Pod identifies the client pod (the node agent knows it from the pod's network namespace).
type Pod struct {
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	UID            string `json:"uid,omitempty"`
	ServiceAccount string `json:"service_account,omitempty"`
}

// Process identifies the client program (eBPF steering records it at connect time).
type Process struct {
	PID    uint32 `json:"pid"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	Comm   string `json:"comm"`
	Exe    string `json:"exe,omitempty"`
	Cgroup uint64 `json:"cgroup"`
}

// Time marshals as RFC 3339 in UTC with exactly three fractional digits, as the log contract says.
type Time struct{ time.Time }

// MarshalJSON implements json.Marshaler.
func (t Time) MarshalJSON() ([]byte, error) {
	return t.appendJSON(make([]byte, 0, 32)), nil
}

// timeLayout is the log's time format: RFC 3339, UTC, milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func (t Time) appendJSON(b []byte) []byte {
	b = append(b, '"')
	u := t.UTC()
	year, month, day := u.Date()
	if year < 0 || year > 9999 {
		// Four digits do not hold it; the layout's own rules apply.
		b = u.AppendFormat(b, timeLayout)
		return append(b, '"')
	}
	// The layout written by hand: AppendFormat interprets it on every call, which was a sixth of
	// the encoder's time.
	hour, min, sec := u.Clock()
	b = appendDigits(b, year, 4)
	b = appendDigits(append(b, '-'), int(month), 2)
	b = appendDigits(append(b, '-'), day, 2)
	b = appendDigits(append(b, 'T'), hour, 2)
	b = appendDigits(append(b, ':'), min, 2)
	b = appendDigits(append(b, ':'), sec, 2)
	b = appendDigits(append(b, '.'), u.Nanosecond()/1e6, 3)
	return append(b, 'Z', '"')
}

// appendDigits appends v (0 <= v < 10^width) in exactly width decimal digits.
func appendDigits(b []byte, v, width int) []byte {
	var d [4]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}

// AppendJSON appends r as encoding/json.Marshal encodes it, byte for byte (the same keys in the
// same order, omitempty as the struct tags say, the same string escaping: HTML-safe, U+2028 and
// U+2029 escaped, invalid UTF-8 as \ufffd), without reflection or allocation. The flow log writes
// one per request on the data path; TestFlowRecordEncoding and FuzzFlowRecordEncoding hold it
// to encoding/json's output. A field added to FlowRecord, Process or Pod must be added here too
// (TestFlowRecordEncodingEveryField fails until it is).
func (r *FlowRecord) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":`...)
	b = r.Time.appendJSON(b)
	b = appendStringField(b, `,"flow":`, r.Flow)
	b = appendStringField(b, `,"client":`, r.Client)
	b = appendStringField(b, `,"orig_dst":`, r.OrigDst)
	b = appendStringField(b, `,"mechanism":`, r.Mechanism)
	b = appendStringField(b, `,"sni":`, r.SNI)
	b = appendStringField(b, `,"tls":`, r.TLS)
	b = strconv.AppendInt(append(b, `,"level":`...), int64(r.Level), 10)
	b = appendStringField(b, `,"http_method":`, r.HTTPMethod)
	b = appendStringField(b, `,"path":`, r.Path)
	b = strconv.AppendInt(append(b, `,"status":`...), int64(r.Status), 10)
	b = appendStringField(b, `,"mcp_version":`, r.MCPVersion)
	b = appendStringField(b, `,"mcp_method":`, r.MCPMethod)
	b = appendStringField(b, `,"mcp_name":`, r.MCPName)
	b = appendStringField(b, `,"jsonrpc_id":`, r.JSONRPCID)
	b = appendStringField(b, `,"direction":`, r.Direction)
	b = appendStringField(b, `,"decision":`, r.Decision)
	b = appendStringField(b, `,"rule":`, r.Rule)
	b = appendStringField(b, `,"reason":`, r.Reason)
	b = strconv.AppendInt(append(b, `,"bytes_up":`...), r.BytesUp, 10)
	b = strconv.AppendInt(append(b, `,"bytes_down":`...), r.BytesDown, 10)
	b = strconv.AppendInt(append(b, `,"duration_ms":`...), r.DurationMS, 10)
	if r.Iss != "" {
		b = appendStringField(b, `,"iss":`, r.Iss)
	}
	if r.Sub != "" {
		b = appendStringField(b, `,"sub":`, r.Sub)
	}
	if r.Credential != "" {
		b = appendStringField(b, `,"credential":`, r.Credential)
	}
	if r.CredentialSource != "" {
		b = appendStringField(b, `,"credential_source":`, r.CredentialSource)
	}
	if r.TraceID != "" {
		b = appendStringField(b, `,"trace_id":`, r.TraceID)
	}
	if r.SpanID != "" {
		b = appendStringField(b, `,"span_id":`, r.SpanID)
	}
	if p := r.Process; p != nil {
		b = strconv.AppendUint(append(b, `,"process":{"pid":`...), uint64(p.PID), 10)
		b = strconv.AppendUint(append(b, `,"uid":`...), uint64(p.UID), 10)
		b = strconv.AppendUint(append(b, `,"gid":`...), uint64(p.GID), 10)
		b = appendStringField(b, `,"comm":`, p.Comm)
		if p.Exe != "" {
			b = appendStringField(b, `,"exe":`, p.Exe)
		}
		b = strconv.AppendUint(append(b, `,"cgroup":`...), p.Cgroup, 10)
		b = append(b, '}')
	}
	if p := r.Pod; p != nil {
		b = appendStringField(b, `,"pod":{"namespace":`, p.Namespace)
		b = appendStringField(b, `,"name":`, p.Name)
		if p.UID != "" {
			b = appendStringField(b, `,"uid":`, p.UID)
		}
		if p.ServiceAccount != "" {
			b = appendStringField(b, `,"service_account":`, p.ServiceAccount)
		}
		b = append(b, '}')
	}
	if r.Mode != "" {
		b = appendStringField(b, `,"mode":`, r.Mode)
	}
	if r.Point != "" {
		b = appendStringField(b, `,"point":`, r.Point)
	}
	return append(b, '}')
}

func appendStringField(b []byte, key, s string) []byte {
	return appendJSONString(append(b, key...), s)
}

// jsonSafe marks the ASCII bytes encoding/json writes as they are (with HTML escaping, its
// default): everything from space up except '"', '\\', '<', '>' and '&'.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// appendJSONString is encoding/json's string encoder (appendString with escapeHTML).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // other control bytes, and <, >, &
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
