package cniproto

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(r *Request)
		want string // "" valid
	}{
		{"valid add", func(*Request) {}, ""},
		{"valid del without netns", func(r *Request) { r.Command, r.Netns = CmdDel, "" }, ""},
		{"valid without uid, ifname or ips", func(r *Request) { r.Pod.UID, r.IfName, r.IPs = "", "", nil }, ""},
		{"dotted pod name", func(r *Request) { r.Pod.Name = "web.v1-abc" }, ""},
		{"version 0", func(r *Request) { r.Version = 0 }, "unsupported protocol version 0"},
		{"version 2", func(r *Request) { r.Version = 2 }, "unsupported protocol version 2"},
		{"lower-case command", func(r *Request) { r.Command = "add" }, "unknown command"},
		{"no container id", func(r *Request) { r.ContainerID = "" }, "container_id is empty"},
		{"long container id", func(r *Request) { r.ContainerID = strings.Repeat("a", 257) }, "container_id"},
		{"add without netns", func(r *Request) { r.Netns = "" }, "not an absolute path"},
		{"check relative netns", func(r *Request) { r.Command, r.Netns = CmdCheck, "proc/1/ns/net" }, "not an absolute path"},
		{"netns with newline", func(r *Request) { r.Netns = "/run/netns/a\nb" }, "printable"},
		{"long ifname", func(r *Request) { r.IfName = "eth0123456789abc" }, "interface name"},
		{"no name", func(r *Request) { r.Pod.Name = "" }, "pod.name is empty"},
		{"upper-case namespace", func(r *Request) { r.Pod.Namespace = "Default" }, "pod.namespace"},
		{"namespace with dot", func(r *Request) { r.Pod.Namespace = "a.b" }, "pod.namespace"},
		{"name with slash", func(r *Request) { r.Pod.Name = "../etc" }, "pod.name"},
		{"name ending in dash", func(r *Request) { r.Pod.Name = "web-" }, "pod.name"},
		{"long namespace", func(r *Request) { r.Pod.Namespace = strings.Repeat("a", 64) }, "longer than 63"},
		{"uid with slash", func(r *Request) { r.Pod.UID = "a/b" }, "pod.uid"},
		{"too many ips", func(r *Request) { r.IPs = make([]string, 65) }, "at most 64"},
		{"bare ip", func(r *Request) { r.IPs = []string{"10.0.0.1"} }, "CIDR form"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validAdd()
			tt.edit(&r)
			err := r.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one with %q", err, tt.want)
			}
		})
	}
}

func TestSpoolName(t *testing.T) {
	noUID := validAdd()
	noUID.Pod.UID = ""
	odd := validAdd()
	odd.Pod.UID = "..\\x"
	long := validAdd()
	long.Pod.UID = ""
	long.Pod.Name = strings.Repeat("n", 253)
	tests := []struct {
		name string
		req  Request
		want string
	}{
		{"uid", validAdd(), "uid-5d0c1f5e-1b3a-4c1e-9a55-3f1f0c2b7d11.json"},
		{"namespace and name", noUID, "pod-default_client-0.json"},
		{"unsafe uid hashed", odd, "sha-"},
		{"long name hashed", long, "sha-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SpoolName(tt.req)
			if !strings.HasPrefix(got, tt.want) || strings.ContainsAny(got, "/\\") || len(got) > 255 {
				t.Errorf("SpoolName = %q, want %q...", got, tt.want)
			}
		})
	}
}

func TestSpool(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	a := validAdd()
	b := validAdd()
	b.Pod = PodRef{Namespace: "team-b", Name: "server-0"}
	b.ContainerID = "feed"

	if reqs, err := ReadSpool(dir); err != nil || len(reqs) != 0 {
		t.Fatalf("missing spool: %v, %v", reqs, err)
	}
	for _, r := range []Request{a, b} {
		if err := WriteSpool(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, SpoolName(a))); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("spool file: %v, %v; want mode 0600", fi, err)
	}
	reqs, err := ReadSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Request{b, a}; !reflect.DeepEqual(reqs, want) { // file name order: pod-... before uid-...
		t.Errorf("ReadSpool = %+v, want %+v", reqs, want)
	}

	// A newer sandbox of the same pod replaces the pending ADD; a late DEL of the old one keeps it.
	a2 := a
	a2.ContainerID, a2.Netns = "0123abce", "/var/run/netns/cni-5678"
	if err := WriteSpool(dir, a2); err != nil {
		t.Fatal(err)
	}
	delOld := a
	delOld.Command, delOld.Netns = CmdDel, ""
	if err := RemoveSpool(dir, delOld); err != nil {
		t.Fatal(err)
	}
	if reqs, _ := ReadSpool(dir); len(reqs) != 2 || !reflect.DeepEqual(reqs[1], a2) {
		t.Errorf("after the old sandbox's DEL: %+v, want b and a2", reqs)
	}
	delNew := a2
	delNew.Command = CmdDel
	for i := range 2 { // idempotent
		if err := RemoveSpool(dir, delNew); err != nil {
			t.Fatalf("RemoveSpool #%d: %v", i+1, err)
		}
	}
	if reqs, _ := ReadSpool(dir); !reflect.DeepEqual(reqs, []Request{b}) {
		t.Errorf("after DEL: %+v, want only b", reqs)
	}
	// Without a container id (the agent removing what it enrolled), the pod's file goes.
	if err := RemoveSpool(dir, Request{Pod: b.Pod}); err != nil {
		t.Fatal(err)
	}
	if reqs, _ := ReadSpool(dir); len(reqs) != 0 {
		t.Errorf("after removing b: %+v", reqs)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Errorf("left in the spool: %s", e.Name())
	}
}

func TestSpoolRefuses(t *testing.T) {
	dir := t.TempDir()
	del := validAdd()
	del.Command = CmdDel
	bad := validAdd()
	bad.Netns = "relative"
	for _, tt := range []struct {
		name string
		req  Request
	}{{"del", del}, {"invalid", bad}} {
		t.Run(tt.name, func(t *testing.T) {
			if err := WriteSpool(dir, tt.req); err == nil {
				t.Error("spooled")
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left: %v", entries)
	}
}

func TestReadSpoolSkipsMalformed(t *testing.T) {
	dir := t.TempDir()
	good := validAdd()
	if err := WriteSpool(dir, good); err != nil {
		t.Fatal(err)
	}
	del := validAdd()
	del.Command = CmdDel
	delLine, _ := json.Marshal(del)
	files := map[string]string{
		"pod-a_garbage.json":   "{not json",
		"pod-a_unknown.json":   `{"version":1,"command":"ADD","container_id":"x","netns":"/n","pod":{"namespace":"a","name":"b"},"extra":1}`,
		"pod-a_version.json":   `{"version":9,"command":"ADD","container_id":"x","netns":"/n","pod":{"namespace":"a","name":"b"}}`,
		"pod-a_del.json":       string(delLine),
		".tmp-123":             "half a wri", // an interrupted write: ignored, not reported
		"README":               "not a spool file",
		"pod-a_huge.json":      strings.Repeat(" ", MaxMessageBytes+1),
		"pod-a_truncated.json": `{"version":1,"command":"ADD"`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	reqs, err := ReadSpool(dir)
	if !reflect.DeepEqual(reqs, []Request{good}) {
		t.Errorf("ReadSpool = %+v, want only the good one", reqs)
	}
	if err == nil {
		t.Fatal("no error for the malformed files")
	}
	for _, name := range []string{"garbage", "unknown", "version", "del", "huge", "truncated"} {
		if !strings.Contains(err.Error(), "pod-a_"+name+".json") {
			t.Errorf("error does not name pod-a_%s.json: %v", name, err)
		}
	}
	for _, name := range []string{".tmp-123", "README"} {
		if strings.Contains(err.Error(), name) {
			t.Errorf("error names %s: %v", name, err)
		}
	}
}

// TestSpoolAtomic: readers racing writers of the same pod never see a partial file.
func TestSpoolAtomic(t *testing.T) {
	dir := t.TempDir()
	big := validAdd()
	for i := range 60 {
		big.IPs = append(big.IPs, "10.0."+itoa(i)+".1/24")
	}
	if err := WriteSpool(dir, big); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			r := big
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r.ContainerID = "c" + itoa(w) + "x" + itoa(i)
				if err := WriteSpool(dir, r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 300 {
		reqs, err := ReadSpool(dir)
		if err != nil || len(reqs) != 1 {
			t.Errorf("ReadSpool during writes: %d requests, %v", len(reqs), err)
			break
		}
	}
	close(stop)
	wg.Wait()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("spool holds %d files after the writes, want 1", len(entries))
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func FuzzDecodeRequest(f *testing.F) {
	good, _ := json.Marshal(validAdd())
	f.Add(append(good, '\n'))
	f.Add([]byte(`{"version":1,"command":"DEL","container_id":"a","netns":"","pod":{"namespace":"n","name":"p"}}`))
	f.Add([]byte(`{"version":1,"command":"CHECK","container_id":"a","netns":"/x","pod":{"namespace":"n","name":"p"},"ips":["::1/128"]}` + "\n"))
	f.Add([]byte(`{"Version":1,"COMMAND":"ADD"}`))
	f.Add([]byte(`{"version":1,"version":2}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeRequest(data)
		if err != nil {
			if !reflect.DeepEqual(req, Request{}) {
				t.Fatalf("error %v with a non-zero request %+v", err, req)
			}
			return
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("decoded request does not validate: %v", err)
		}
		line, err := encodeLine(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeRequest(line)
		if err != nil {
			t.Fatalf("re-encoded %q: %v", line, err)
		}
		if !reflect.DeepEqual(again, req) {
			t.Fatalf("round trip changed the request: %+v != %+v", again, req)
		}
		if SpoolName(req) == "" || strings.ContainsRune(SpoolName(req), '/') {
			t.Fatalf("unsafe spool name %q", SpoolName(req))
		}
	})
}
