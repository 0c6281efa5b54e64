package level2

import (
	"container/list"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sessions remembers, across the connections of one appliance, what Level 2 learnt about each MCP
// session: the protocol version initialize negotiated and the client's clientInfo (later requests
// of a session carry neither, and often come on another TCP connection), and for the 2024-11-05
// HTTP+SSE transport the requests POSTed to the endpoint, whose responses arrive on the GET stream
// (another connection). It is bounded: the least recently used session is forgotten first, and each
// session keeps at most maxPending outstanding requests.
type Sessions struct {
	mu  sync.Mutex
	max int
	// Sessions are charged to the client that caused them (its address: Owner.client) and kept
	// per client, each client's own least recently used first: a flood from one client (its
	// own requests, or endpoint events its server sends on its flows) evicts that client's
	// sessions, never another's. A client holds at most max/clientShare sessions; when the
	// registry is full the client holding the most loses its oldest.
	owners map[string]*list.List // client -> its sessions, most recent first
	byKey  map[string]*list.Element
	// streams is the path of the 2024-11-05 GET stream that announced each endpoint, by session
	// key (setStreamPath), forgotten with the last session of that key.
	streams map[string]string
	// schemas are the tool input schemas learnt from tools/list (validate_arguments), bounded
	// and expiring on their own.
	schemas *schemaStore
	// endpoints is set once a 2024-11-05 endpoint was opened: until then no request needs the
	// endpoint lookup (a hash and a lock) to tell whether it is a legacy POST.
	endpoints atomic.Bool
}

// DefaultSessions bounds a Sessions built with 0.
const DefaultSessions = 10000

const maxPending = 256

// clientShare: one client may hold at most 1/clientShare of the registry.
const clientShare = 10

// maxSessionsPerFlow bounds the sessions one connection may open: past it the flow's oldest is
// forgotten first (a client multiplexing many sessions over one connection keeps its newest).
const maxSessionsPerFlow = 256

// Owner is who opens sessions: one per flow (connection), naming its client. Level 2 makes one
// per stage; a nil Owner is an anonymous client of its own.
type Owner struct {
	client  string
	created []string // registry keys this flow created, oldest first (at most maxSessionsPerFlow)
}

// NewOwner returns the Owner of one flow of client (its address).
func NewOwner(client string) *Owner { return &Owner{client: client} }

func (o *Owner) clientKey() string {
	if o == nil {
		return ""
	}
	return o.client
}

// Pending is a request whose response has not been seen yet.
type Pending struct {
	Method, Name string
	ID           string    // the id as records show it (IDText)
	Cursor       bool      // a list request for a later page
	Progress     string    // its params._meta.progressToken as clients match it (progressKey; "" none)
	span         *openSpan // the request's span, ended by the stream that answers it
}

type session struct {
	key   string // registry key: client and session key
	owner string // the client it is charged to
	// ambiguous: two different clientInfos were given for the session (a server that names
	// another client's endpoint, a client that initializes twice): its client cannot be told.
	ambiguous  bool
	version    string
	clientInfo map[string]any
	pending    map[string]Pending // by JSON-RPC id text
	order      []string           // ids in arrival order, to bound pending
	stream     string             // 2024-11-05: the path of the GET stream that announced the endpoint
}

// NewSessions returns a registry of at most max sessions (0: DefaultSessions).
func NewSessions(max int) *Sessions {
	if max <= 0 {
		max = DefaultSessions
	}
	return &Sessions{max: max, owners: map[string]*list.List{}, byKey: map[string]*list.Element{},
		schemas: newSchemaStore(0, 0)}
}

// toolSchemas is the appliance's memory of tool input schemas (nil without a registry).
func (s *Sessions) toolSchemas() *schemaStore {
	if s == nil {
		return nil
	}
	return s.schemas
}

// regKey is the registry key of session key for o's client: sessions are per client, so that a
// server naming another client's endpoint, or a client sending another's Mcp-Session-Id, reaches
// only sessions of its own client.
func regKey(o *Owner, key string) string { return o.clientKey() + "\x00" + key }

// get returns the session for key, creating it for o when create is set; nil otherwise. Call with
// mu.
func (s *Sessions) get(o *Owner, key string, create bool) *session {
	rk := regKey(o, key)
	if e, ok := s.byKey[rk]; ok {
		ss := e.Value.(*session)
		s.owners[ss.owner].MoveToFront(e)
		return ss
	}
	if !create {
		return nil
	}
	client := o.clientKey()
	l := s.owners[client]
	if l == nil {
		l = list.New()
		s.owners[client] = l
	}
	perClient := max(1, s.max/clientShare)
	switch {
	case l.Len() >= perClient:
		s.evict(l.Back())
	case len(s.byKey) >= s.max:
		// Full with many clients: the one holding the most pays.
		var big *list.List
		for _, ol := range s.owners {
			if big == nil || ol.Len() > big.Len() {
				big = ol
			}
		}
		s.evict(big.Back())
	}
	if o != nil {
		if len(o.created) >= maxSessionsPerFlow {
			if e, ok := s.byKey[o.created[0]]; ok {
				s.evict(e)
			}
			o.created = o.created[1:]
		}
		o.created = append(o.created, rk)
	}
	ss := &session{key: rk, owner: client}
	s.byKey[rk] = l.PushFront(ss)
	return ss
}

// evict forgets the session of e. Call with mu.
func (s *Sessions) evict(e *list.Element) {
	if e == nil {
		return
	}
	old := e.Value.(*session)
	l := s.owners[old.owner]
	l.Remove(e)
	if l.Len() == 0 {
		delete(s.owners, old.owner)
	}
	delete(s.byKey, old.key)
	if old.stream != "" {
		delete(s.streams, old.key[strings.IndexByte(old.key, 0)+1:])
	}
	// Its requests still pending will not be answered here: their spans end now.
	for _, p := range old.pending {
		p.span.end(nil, 0, 0, false, time.Now())
	}
}

// Open makes sure a session exists for key (a 2024-11-05 endpoint announced on a GET stream),
// so that POSTs to that endpoint are known to belong to it. The key is the server's choice: one
// that already exists was announced to another stream too (or posted to before any stream
// announced it), so it may name another client's session — a hostile server that tells an
// untrusted client's stream the trusted client's endpoint, then samples on that stream before
// the untrusted client sends anything. Such a session's client can no longer be told: it is
// made ambiguous (Lookup knows no client for it), never inherited by the new stream.
func (s *Sessions) Open(o *Owner, key string) {
	if s == nil || key == "" {
		return
	}
	s.endpoints.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.get(o, key, false); ss != nil {
		ss.clientInfo, ss.ambiguous = nil, true
		return
	}
	s.get(o, key, true)
}

// setStreamPath records the path of the 2024-11-05 GET stream (target, its query left out)
// that announced session key's endpoint.
func (s *Sessions) setStreamPath(o *Owner, key, target string) {
	if s == nil || key == "" {
		return
	}
	p := pathOf(target)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(o, key, true).stream = p
	if s.streams == nil {
		s.streams = map[string]string{}
	}
	s.streams[key] = p
}

// streamPath is what setStreamPath recorded for key ("" nothing): tool integrity names the
// server of a 2024-11-05 POST by it, whichever client's session it is.
func (s *Sessions) streamPath(key string) string {
	if s == nil || key == "" {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[key]
}

// KnownEndpoint reports whether target is the endpoint a 2024-11-05 GET stream of o's client
// announced.
func (s *Sessions) KnownEndpoint(o *Owner, target string) bool {
	return s != nil && s.endpoints.Load() && s.Known(o, legacyKey(target))
}

// Known reports whether a session exists for key.
func (s *Sessions) Known(o *Owner, key string) bool {
	if s == nil || key == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get(o, key, false) != nil
}

// SetVersion records the version a session negotiated.
func (s *Sessions) SetVersion(o *Owner, key, version string) {
	if s == nil || key == "" || version == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(o, key, true).version = version
}

// SetClientInfo records the clientInfo a session's initialize carried. A second, different one
// makes the session's client ambiguous: Lookup then knows no client for it.
func (s *Sessions) SetClientInfo(o *Owner, key string, info map[string]any) {
	if s == nil || key == "" || info == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.get(o, key, true)
	switch {
	case ss.ambiguous:
	case ss.clientInfo != nil && !sameInfo(ss.clientInfo, info):
		ss.clientInfo, ss.ambiguous = nil, true
	default:
		ss.clientInfo = info
	}
}

// Lookup returns what is known of a session: its version, and its client's info (nil when no
// initialize was seen for it, or two clients claimed it).
func (s *Sessions) Lookup(o *Owner, key string) (version string, clientInfo map[string]any) {
	if s == nil || key == "" {
		return "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.get(o, key, false); ss != nil {
		return ss.version, ss.clientInfo
	}
	return "", nil
}

// AddPending remembers a request of a session whose response will come elsewhere.
func (s *Sessions) AddPending(o *Owner, key, id string, p Pending) {
	if s == nil || key == "" || id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.get(o, key, true)
	if ss.pending == nil {
		ss.pending = map[string]Pending{}
	}
	var evicted *openSpan
	if _, dup := ss.pending[id]; !dup {
		if len(ss.order) >= maxPending {
			evicted = ss.pending[ss.order[0]].span
			delete(ss.pending, ss.order[0])
			ss.order = ss.order[1:]
		}
		ss.order = append(ss.order, id)
	} else {
		evicted = ss.pending[id].span
	}
	ss.pending[id] = p
	if evicted != nil && evicted != p.span {
		// Forgotten unanswered: its span ends now rather than never (End does not block).
		evicted.end(nil, 0, 0, false, time.Now())
	}
}

// PendingOf returns the requests of session key still awaiting their response, oldest first
// (a copy: the caller judges messages by them without the lock).
func (s *Sessions) PendingOf(o *Owner, key string) []Pending {
	if s == nil || key == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.get(o, key, false)
	if ss == nil || len(ss.order) == 0 {
		return nil
	}
	out := make([]Pending, 0, len(ss.order))
	for _, id := range ss.order {
		out = append(out, ss.pending[id])
	}
	return out
}

// TakePending returns and forgets the request a response answers.
func (s *Sessions) TakePending(o *Owner, key, id string) (Pending, bool) {
	if s == nil || key == "" || id == "" {
		return Pending{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.get(o, key, false)
	if ss == nil || ss.pending == nil {
		return Pending{}, false
	}
	p, ok := ss.pending[id]
	if ok {
		delete(ss.pending, id)
		for i, v := range ss.order {
			if v == id {
				ss.order = append(ss.order[:i], ss.order[i+1:]...)
				break
			}
		}
	}
	return p, ok
}

// Len is the number of sessions held.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}

// sameInfo reports whether two clientInfos are the same (JSON values, decoded).
func sameInfo(a, b map[string]any) bool { return reflect.DeepEqual(a, b) }
