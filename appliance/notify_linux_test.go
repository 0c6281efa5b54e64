package appliance

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSDNotify: the messages reach a socket named by $NOTIFY_SOCKET, as a path and as an abstract
// name, in the order systemd reads them; without the variable nothing is sent.
func TestSDNotify(t *testing.T) {
	for _, tc := range []struct{ name, addr string }{
		{"path", filepath.Join(t.TempDir(), "notify")},
		{"abstract", "@mcpintercept-notify-test-" + strings.ReplaceAll(t.Name(), "/", "-")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: tc.addr, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			t.Setenv("NOTIFY_SOCKET", tc.addr)
			sdReady()
			done := sdReloading()
			done()
			sdStopping()
			var got []string
			buf := make([]byte, 4096)
			for range 4 {
				l.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, err := l.Read(buf)
				if err != nil {
					t.Fatalf("read: %v (got %q)", err, got)
				}
				got = append(got, strings.SplitN(string(buf[:n]), "\n", 2)[0])
			}
			want := []string{"READY=1", "RELOADING=1", "READY=1", "STOPPING=1"}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("notifications %q, want %q", got, want)
			}
		})
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if sdNotify("READY=1") {
		t.Error("sent without NOTIFY_SOCKET")
	}
}
