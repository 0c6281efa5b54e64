package devhost

import (
	"bytes"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"mcpintercept/intercept"
)

// fakeUsers is a user database: root, alice (uid 1000, groups 1000 27 100), bob (uid 1001, whose
// groups cannot be listed), svc (uid 1002, no home).
func fakeUsers() userDB {
	users := []*user.User{
		{Uid: "0", Gid: "0", Username: "root", HomeDir: "/root"},
		{Uid: "1000", Gid: "1000", Username: "alice", HomeDir: "/home/alice"},
		{Uid: "1001", Gid: "1001", Username: "bob", HomeDir: "/home/bob"},
		{Uid: "1002", Gid: "1002", Username: "svc"},
	}
	groups := map[string][]string{"0": {"0"}, "1000": {"1000", "27", "100"}, "1002": {"1002"}}
	return userDB{
		lookupID: func(uid string) (*user.User, error) {
			for _, u := range users {
				if u.Uid == uid {
					return u, nil
				}
			}
			n, _ := strconv.Atoi(uid)
			return nil, user.UnknownUserIdError(n)
		},
		lookupName: func(name string) (*user.User, error) {
			for _, u := range users {
				if u.Username == name {
					return u, nil
				}
			}
			return nil, user.UnknownUserError(name)
		},
		groupIDs: func(u *user.User) ([]string, error) {
			if g, ok := groups[u.Uid]; ok {
				return g, nil
			}
			return nil, os.ErrNotExist
		},
	}
}

func TestResolveExecUser(t *testing.T) {
	alice := &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{1000, 27, 100}}
	aliceEnv := []string{"HOME=/home/alice", "USER=alice", "LOGNAME=alice"}
	rootEnv := []string{"HOME=/root", "USER=root", "LOGNAME=root"}
	tests := []struct {
		name    string
		flag    *string // nil: --user not given
		env     map[string]string
		euid    int
		cred    *syscall.Credential
		wantEnv []string
		err     string
	}{
		{name: "root, no sudo: stays root", euid: 0},
		{name: "sudo by alice", env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": "1000"}, cred: alice, wantEnv: aliceEnv},
		{name: "sudo, SUDO_GID wins over passwd gid", env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": "27"},
			cred: &syscall.Credential{Uid: 1000, Gid: 27, Groups: []uint32{27, 1000, 100}}, wantEnv: aliceEnv},
		{name: "sudo without SUDO_GID: passwd gid", env: map[string]string{"SUDO_UID": "1000"}, cred: alice, wantEnv: aliceEnv},
		{name: "sudo by a uid not in the database: just SUDO_GID", env: map[string]string{"SUDO_UID": "4242", "SUDO_GID": "4343"},
			cred: &syscall.Credential{Uid: 4242, Gid: 4343, Groups: []uint32{4343}}},
		{name: "sudo by a user whose groups cannot be listed", env: map[string]string{"SUDO_UID": "1001", "SUDO_GID": "1001"},
			cred: &syscall.Credential{Uid: 1001, Gid: 1001, Groups: []uint32{1001}}, wantEnv: []string{"HOME=/home/bob", "USER=bob", "LOGNAME=bob"}},
		{name: "user without a home keeps HOME", env: map[string]string{"SUDO_UID": "1002", "SUDO_GID": "1002"},
			cred: &syscall.Credential{Uid: 1002, Gid: 1002, Groups: []uint32{1002}}, wantEnv: []string{"USER=svc", "LOGNAME=svc"}},
		{name: "sudo by root", env: map[string]string{"SUDO_UID": "0", "SUDO_GID": "0"}},
		{name: "SUDO_UID not numeric", env: map[string]string{"SUDO_UID": "alice", "SUDO_GID": "1000"}, err: `exec: SUDO_UID="alice" is not a numeric uid`},
		{name: "SUDO_UID negative", env: map[string]string{"SUDO_UID": "-1", "SUDO_GID": "1000"}, err: `exec: SUDO_UID="-1" is not a numeric uid`},
		{name: "SUDO_GID not numeric", env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": "x"}, err: `exec: SUDO_GID="x" is not a numeric gid`},
		{name: "unknown SUDO_UID, no SUDO_GID", env: map[string]string{"SUDO_UID": "4242"}, err: "no SUDO_GID and no user database entry"},
		{name: "not root: runs as itself, SUDO_UID ignored", euid: 1000, env: map[string]string{"SUDO_UID": "1001", "SUDO_GID": "1001"}},
		{name: "--user by name", flag: ptr("alice"), cred: alice, wantEnv: aliceEnv},
		{name: "--user by number", flag: ptr("1000"), cred: alice, wantEnv: aliceEnv},
		{name: "--user wins over SUDO_UID", flag: ptr("alice"), env: map[string]string{"SUDO_UID": "1001", "SUDO_GID": "1001"}, cred: alice, wantEnv: aliceEnv},
		{name: "--user root under sudo", flag: ptr("root"), env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": "1000"}, wantEnv: rootEnv},
		{name: "--user 0 under sudo", flag: ptr("0"), env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": "1000"}, wantEnv: rootEnv},
		{name: "--user unknown name", flag: ptr("nobodyX"), err: "exec: --user nobodyX: unknown user"},
		{name: "--user unknown uid", flag: ptr("4242"), err: "exec: --user 4242: unknown user"},
		{name: "--user out of range", flag: ptr("99999999999"), err: "exec: --user 99999999999: not a valid uid"},
		{name: "--user empty", flag: ptr(""), err: "exec: --user: empty"},
		{name: "--user another user when not root", flag: ptr("bob"), euid: 1000, err: "exec: --user bob: only root can run the command as another user"},
		{name: "--user self when not root", flag: ptr("alice"), euid: 1000, wantEnv: aliceEnv},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			flagUser, flagSet := "", tc.flag != nil
			if flagSet {
				flagUser = *tc.flag
			}
			got, err := resolveExecUser(flagUser, flagSet, func(k string) string { return tc.env[k] }, tc.euid, fakeUsers())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Cred, tc.cred) {
				t.Errorf("cred = %+v, want %+v", got.Cred, tc.cred)
			}
			if !reflect.DeepEqual(got.Env, tc.wantEnv) {
				t.Errorf("env = %q, want %q", got.Env, tc.wantEnv)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func TestSetEnv(t *testing.T) {
	got := setEnv([]string{"HOME=/root", "PATH=/bin", "USER=root", "HOMEX=1"}, "HOME=/home/a", "USER=a")
	want := []string{"PATH=/bin", "HOMEX=1", "HOME=/home/a", "USER=a"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// nobodyCred is the credential of the host's nobody user; the test is skipped without root or
// without that user.
func nobodyCred(t *testing.T) (*syscall.Credential, *user.User) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (changes user)")
	}
	id, err := resolveExecUser("nobody", true, os.Getenv, 0, systemUsers)
	if err != nil {
		t.Skip("no user nobody:", err)
	}
	u, _ := user.Lookup("nobody")
	return id.Cred, u
}

// openTempDir is a temporary directory others can enter.
func openTempDir(t *testing.T) string {
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	return dir
}

func TestReadFileAsUsesTheUsersPermissions(t *testing.T) {
	cred, _ := nobodyCred(t)
	dir := openTempDir(t)
	secret := filepath.Join(dir, "secret")
	public := filepath.Join(dir, "public")
	os.WriteFile(secret, []byte("s"), 0o600)
	os.WriteFile(public, []byte("p"), 0o644)
	os.Chmod(public, 0o644)
	if _, err := readFileAs(secret, cred); !os.IsPermission(err) {
		t.Fatalf("reading a root-only file as nobody: err = %v, want permission denied", err)
	}
	if b, err := readFileAs(public, cred); err != nil || string(b) != "p" {
		t.Fatalf("reading a public file as nobody: %q, %v", b, err)
	}
	// The rest of the process kept its credentials.
	if b, err := readFileAs(secret, nil); err != nil || string(b) != "s" {
		t.Fatalf("reading as root afterwards: %q, %v", b, err)
	}
	if _, err := readFileAs("/dev/zero", nil); err == nil {
		t.Fatal("read a device")
	}
}

// TestExecChildRunsAsUserAndReadsBundle runs the start path of exec without steering: the trust
// bundle for nobody, a child started as nobody (inside a fresh cgroup when cgroup v2 is at hand)
// that reads the bundle; the user's own CA file is read as the user, a root-only one is not.
func TestExecChildRunsAsUserAndReadsBundle(t *testing.T) {
	cred, u := nobodyCred(t)
	dir := openTempDir(t)
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, []byte("APPLIANCE-CA\n"), 0o600) // the CA cert as root keeps it; only its content is copied
	userExtra := filepath.Join(dir, "extra.pem")
	os.WriteFile(userExtra, []byte("USER-EXTRA\n"), 0o644)
	os.Chmod(userExtra, 0o644)
	rootOnly := filepath.Join(dir, "shadow")
	os.WriteFile(rootOnly, []byte("ROOT-SECRET\n"), 0o600)

	for _, tc := range []struct{ extra, want, notWant string }{
		{extra: userExtra, want: "USER-EXTRA"},
		{extra: rootOnly, notWant: "ROOT-SECRET"},
	} {
		env := setEnv(os.Environ(), "HOME="+u.HomeDir, "NODE_EXTRA_CA_CERTS="+tc.extra, "SSL_CERT_FILE="+rootOnly)
		env, trustDir, err := trustEnv(env, caFile, cred)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(trustDir)
		if err != nil {
			t.Fatal(err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != cred.Uid || st.Mode().Perm() != 0o700 {
			t.Fatalf("trust dir owner %d mode %v, want %d 0700", sys.Uid, st.Mode().Perm(), cred.Uid)
		}

		out := runInCgroup(t, env, cred, `id -u; id -g; cat "$NODE_EXTRA_CA_CERTS" "$SSL_CERT_FILE"; cat /proc/self/cgroup`)
		os.RemoveAll(trustDir)
		lines := strings.Split(out, "\n")
		if len(lines) < 2 || lines[0] != strconv.Itoa(int(cred.Uid)) || lines[1] != strconv.Itoa(int(cred.Gid)) {
			t.Fatalf("child ran as %q, want uid %d gid %d", lines[:2], cred.Uid, cred.Gid)
		}
		if !strings.Contains(out, "APPLIANCE-CA") {
			t.Errorf("child could not read its trust files:\n%s", out)
		}
		if tc.want != "" && !strings.Contains(out, tc.want) {
			t.Errorf("bundle lacks %s:\n%s", tc.want, out)
		}
		if tc.notWant != "" && strings.Contains(out, tc.notWant) {
			t.Errorf("a root-only file named by the environment reached the bundle:\n%s", out)
		}
	}
}

// runInCgroup starts /bin/sh -c script as cred inside a fresh cgroup the way exec does, and
// returns its output after checking that it ran in that cgroup. Skips without cgroup v2.
func runInCgroup(t *testing.T, env []string, cred *syscall.Credential, script string) string {
	t.Helper()
	mnt, _, err := intercept.Cgroup2Mount()
	if err != nil {
		t.Skip("no cgroup v2:", err)
	}
	cg, err := intercept.NewCgroup(mnt)
	if err != nil {
		t.Skip("cannot create a cgroup:", err)
	}
	defer intercept.RemoveCgroup(cg)
	var out bytes.Buffer
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &out
	if err := startInCgroup(cmd, cred, cg); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Logf("child: %v", err) // cat of an unreadable file fails; the output says the rest
	}
	if !strings.Contains(out.String(), "/"+filepath.Base(cg)+"\n") {
		t.Errorf("child not in cgroup %s:\n%s", cg, out.String())
	}
	return out.String()
}
