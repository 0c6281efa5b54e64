package level2

import (
	"fmt"
	"testing"
)

// TestSessionsBoundedPerClient: sessions are charged to the client that caused them. However many
// one client (or one flow of it) opens, another client's session and its identity stay; one flow
// holds at most maxSessionsPerFlow; a session given two different clientInfos names no client.
func TestSessionsBoundedPerClient(t *testing.T) {
	victimInfo := map[string]any{"name": "victim-untrusted"}
	for _, c := range []struct {
		name  string
		size  int
		flood func(s *Sessions)
	}{
		{name: "one flow opens twice the registry", size: 100, flood: func(s *Sessions) {
			o := NewOwner("10.0.0.66")
			for i := range 200 {
				s.Open(o, fmt.Sprint("flood-", i))
			}
		}},
		{name: "many flows of one client", size: 100, flood: func(s *Sessions) {
			for i := range 200 {
				s.AddPending(NewOwner("10.0.0.66"), fmt.Sprint("flood-", i), "1", Pending{})
			}
		}},
		{name: "many clients, each under its share", size: 100, flood: func(s *Sessions) {
			for i := range 200 {
				s.SetClientInfo(NewOwner(fmt.Sprint("10.0.1.", i)), "x", map[string]any{"name": "n"})
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := NewSessions(c.size)
			victim := NewOwner("10.0.0.2")
			s.SetClientInfo(victim, "v", victimInfo)
			c.flood(s)
			if s.Len() > c.size {
				t.Fatalf("%d sessions held, bound %d", s.Len(), c.size)
			}
			_, ci := s.Lookup(NewOwner("10.0.0.2"), "v")
			if c.name != "many clients, each under its share" && ci == nil {
				t.Fatalf("the victim's identity was evicted by another client's flood")
			}
			// Another client naming the victim's session reaches a session of its own.
			if _, ci := s.Lookup(NewOwner("10.0.0.66"), "v"); ci != nil {
				t.Fatalf("another client read the victim's session: %v", ci)
			}
		})
	}
	t.Run("per flow", func(t *testing.T) {
		s := NewSessions(0)
		o := NewOwner("10.0.0.3")
		for i := range maxSessionsPerFlow + 10 {
			s.Open(o, fmt.Sprint("s", i))
		}
		if s.Len() != maxSessionsPerFlow {
			t.Fatalf("one flow holds %d sessions, want %d", s.Len(), maxSessionsPerFlow)
		}
		if !s.Known(o, fmt.Sprint("s", maxSessionsPerFlow+9)) || s.Known(o, "s0") {
			t.Fatal("the flow's newest sessions must stay, its oldest go")
		}
	})
	t.Run("two clientInfos for one session", func(t *testing.T) {
		s := NewSessions(0)
		o := NewOwner("10.0.0.4")
		s.SetClientInfo(o, "k", map[string]any{"name": "a-untrusted"})
		s.SetClientInfo(o, "k", map[string]any{"name": "lab-agent"})
		if _, ci := s.Lookup(o, "k"); ci != nil {
			t.Fatalf("an ambiguous session names %v", ci)
		}
	})
}
