package level2

import (
	"container/list"
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
	mu    sync.Mutex
	max   int
	order *list.List // of *session, most recent first
	byKey map[string]*list.Element
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

// Pending is a request whose response has not been seen yet.
type Pending struct {
	Method, Name string
	Cursor       bool      // a list request for a later page
	span         *openSpan // the request's span, ended by the stream that answers it
}

type session struct {
	key        string
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
	return &Sessions{max: max, order: list.New(), byKey: map[string]*list.Element{},
		schemas: newSchemaStore(0, 0)}
}

// toolSchemas is the appliance's memory of tool input schemas (nil without a registry).
func (s *Sessions) toolSchemas() *schemaStore {
	if s == nil {
		return nil
	}
	return s.schemas
}

// get returns the session for key, creating it when create is set; nil otherwise. Call with mu.
func (s *Sessions) get(key string, create bool) *session {
	if e, ok := s.byKey[key]; ok {
		s.order.MoveToFront(e)
		return e.Value.(*session)
	}
	if !create {
		return nil
	}
	if s.order.Len() >= s.max {
		last := s.order.Back()
		s.order.Remove(last)
		old := last.Value.(*session)
		delete(s.byKey, old.key)
		// Its requests still pending will not be answered here: their spans end now.
		for _, p := range old.pending {
			p.span.end(nil, 0, 0, false, time.Now())
		}
	}
	ss := &session{key: key}
	s.byKey[key] = s.order.PushFront(ss)
	return ss
}

// Open makes sure a session exists for key (a 2024-11-05 endpoint announced on a GET stream),
// so that POSTs to that endpoint are known to belong to it.
func (s *Sessions) Open(key string) {
	if s == nil || key == "" {
		return
	}
	s.endpoints.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(key, true)
}

// setStreamPath records the path of the 2024-11-05 GET stream (target, its query left out)
// that announced session key's endpoint.
func (s *Sessions) setStreamPath(key, target string) {
	if s == nil || key == "" {
		return
	}
	p := pathOf(target)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(key, true).stream = p
}

// streamPath is what setStreamPath recorded for key ("" nothing).
func (s *Sessions) streamPath(key string) string {
	if s == nil || key == "" {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.get(key, false); ss != nil {
		return ss.stream
	}
	return ""
}

// KnownEndpoint reports whether target is the endpoint a 2024-11-05 GET stream announced.
func (s *Sessions) KnownEndpoint(target string) bool {
	return s != nil && s.endpoints.Load() && s.Known(legacyKey(target))
}

// Known reports whether a session exists for key.
func (s *Sessions) Known(key string) bool {
	if s == nil || key == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.get(key, false) != nil
}

// SetVersion records the version a session negotiated.
func (s *Sessions) SetVersion(key, version string) {
	if s == nil || key == "" || version == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(key, true).version = version
}

// SetClientInfo records the clientInfo a session's initialize carried.
func (s *Sessions) SetClientInfo(key string, info map[string]any) {
	if s == nil || key == "" || info == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(key, true).clientInfo = info
}

// Lookup returns what is known of a session.
func (s *Sessions) Lookup(key string) (version string, clientInfo map[string]any) {
	if s == nil || key == "" {
		return "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.get(key, false); ss != nil {
		return ss.version, ss.clientInfo
	}
	return "", nil
}

// AddPending remembers a request of a session whose response will come elsewhere.
func (s *Sessions) AddPending(key, id string, p Pending) {
	if s == nil || key == "" || id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.get(key, true)
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

// TakePending returns and forgets the request a response answers.
func (s *Sessions) TakePending(key, id string) (Pending, bool) {
	if s == nil || key == "" || id == "" {
		return Pending{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.get(key, false)
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
	return s.order.Len()
}
