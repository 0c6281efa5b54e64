package devhost

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// User is who the command of `exec` runs as.
type User struct {
	// Cred is nil when the command runs as exec itself (root not asked to change, or exec not
	// root); otherwise it is the user, group and supplementary groups the child takes.
	Cred *syscall.Credential
	// Env holds the KEY=VALUE pairs (HOME, USER, LOGNAME) taken from the user's passwd entry; the
	// command's environment gets them in place of its own.
	Env []string
	// Name describes the user for messages: "alice (uid 1000)".
	Name string
}

// userDB is the user database resolveExecUser reads: os/user in production, a table in tests.
type userDB struct {
	lookupID   func(uid string) (*user.User, error)
	lookupName func(name string) (*user.User, error)
	groupIDs   func(u *user.User) ([]string, error)
}

var systemUsers = userDB{lookupID: user.LookupId, lookupName: user.Lookup, groupIDs: (*user.User).GroupIds}

// ResolveUser decides who the command runs as (see resolveExecUser) from the --user flag
// (flagSet: given, even empty), this process's environment and its effective uid.
func ResolveUser(flagUser string, flagSet bool) (User, error) {
	return resolveExecUser(flagUser, flagSet, os.Getenv, os.Geteuid(), systemUsers)
}

// resolveExecUser decides who the command of `exec` runs as, from the --user flag (flagSet says it
// was given, even empty), the environment (SUDO_UID, SUDO_GID) and exec's effective uid:
//
//   - --user NAME|UID: that user, with its primary group and supplementary groups; `--user root`
//     (or 0) is how to run the command as root under sudo.
//   - else, as root with SUDO_UID set: the user who ran sudo (SUDO_GID, else the passwd entry's
//     group), with its supplementary groups, or just that group when the user is not in the
//     database.
//   - else: as exec itself (root without sudo stays root; a non-root exec cannot change user).
//
// Errors are worded for the command line: "exec: --user nobodyX: unknown user".
func resolveExecUser(flagUser string, flagSet bool, getenv func(string) string, euid int, db userDB) (User, error) {
	if flagSet {
		if flagUser == "" {
			return User{}, errors.New("exec: --user: empty (give a user name or a numeric uid)")
		}
		u, err := lookupUserArg(flagUser, db)
		if err != nil {
			return User{}, err
		}
		uid, err1 := parseID(u.Uid)
		gid, err2 := parseID(u.Gid)
		if err1 != nil || err2 != nil {
			return User{}, fmt.Errorf("exec: --user %s: user database entry has uid %q, gid %q", flagUser, u.Uid, u.Gid)
		}
		if euid != 0 && int(uid) != euid {
			return User{}, fmt.Errorf("exec: --user %s: only root can run the command as another user", flagUser)
		}
		id := User{Env: passwdEnv(u), Name: describeUser(u.Username, uid)}
		if int(uid) != euid {
			id.Cred = &syscall.Credential{Uid: uid, Gid: gid, Groups: userGroups(u, gid, db)}
		}
		return id, nil
	}
	if euid != 0 {
		return User{}, nil // runs as whoever we are
	}
	sudoUID := getenv("SUDO_UID")
	if sudoUID == "" {
		return User{}, nil // root, not through sudo: root stays root
	}
	uid, err := parseID(sudoUID)
	if err != nil {
		return User{}, fmt.Errorf("exec: SUDO_UID=%q is not a numeric uid (choose with --user NAME|UID, or --user root)", sudoUID)
	}
	if uid == 0 {
		return User{}, nil // root ran sudo
	}
	u, lerr := db.lookupID(sudoUID)
	if lerr != nil {
		u = nil
	}
	var gid uint32
	if s := getenv("SUDO_GID"); s != "" {
		if gid, err = parseID(s); err != nil {
			return User{}, fmt.Errorf("exec: SUDO_GID=%q is not a numeric gid (choose with --user NAME|UID, or --user root)", s)
		}
	} else if u != nil {
		if gid, err = parseID(u.Gid); err != nil {
			return User{}, fmt.Errorf("exec: SUDO_UID=%s: user database entry has gid %q", sudoUID, u.Gid)
		}
	} else {
		return User{}, fmt.Errorf("exec: SUDO_UID=%s: no SUDO_GID and no user database entry (choose with --user NAME|UID, or --user root)", sudoUID)
	}
	id := User{Cred: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{gid}}, Name: describeUser("", uid)}
	if u != nil {
		id.Cred.Groups = userGroups(u, gid, db)
		id.Env = passwdEnv(u)
		id.Name = describeUser(u.Username, uid)
	}
	return id, nil
}

// lookupUserArg finds the --user argument: all digits is a uid, anything else a name.
func lookupUserArg(arg string, db userDB) (*user.User, error) {
	var u *user.User
	var err error
	if _, perr := parseID(arg); perr == nil {
		u, err = db.lookupID(arg)
	} else if strings.Trim(arg, "0123456789") == "" {
		return nil, fmt.Errorf("exec: --user %s: not a valid uid", arg)
	} else {
		u, err = db.lookupName(arg)
	}
	var unknownName user.UnknownUserError
	var unknownID user.UnknownUserIdError
	switch {
	case err == nil:
		return u, nil
	case errors.As(err, &unknownName), errors.As(err, &unknownID):
		return nil, fmt.Errorf("exec: --user %s: unknown user", arg)
	default:
		return nil, fmt.Errorf("exec: --user %s: %v", arg, err)
	}
}

// parseID parses a numeric uid or gid; (uid_t)-1 means "unchanged" to the kernel and is refused.
func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 1<<32-1 {
		return 0, fmt.Errorf("not a numeric id: %q", s)
	}
	return uint32(n), nil
}

// userGroups lists u's groups (primary first), or just gid when the database cannot say.
func userGroups(u *user.User, gid uint32, db userDB) []uint32 {
	groups := []uint32{gid}
	ids, err := db.groupIDs(u)
	if err != nil {
		return groups
	}
	for _, s := range ids {
		if g, err := parseID(s); err == nil && !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	return groups
}

func passwdEnv(u *user.User) []string {
	var env []string
	if u.HomeDir != "" {
		env = append(env, "HOME="+u.HomeDir)
	}
	if u.Username != "" {
		env = append(env, "USER="+u.Username, "LOGNAME="+u.Username)
	}
	return env
}

func describeUser(name string, uid uint32) string {
	if name == "" {
		return fmt.Sprintf("uid %d", uid)
	}
	return fmt.Sprintf("%s (uid %d)", name, uid)
}

// setEnv returns env with each KEY=VALUE of set in place of any earlier value of KEY.
func setEnv(env []string, set ...string) []string {
	keys := map[string]bool{}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !keys[k] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

// maxTrustInput bounds a CA file named by the environment (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS).
const maxTrustInput = 16 << 20

// readFileAs reads a regular file with the file-system identity of cred (nil: our own). exec is
// root, but the files the command's environment names (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS) are
// chosen by the user and their content ends up in a bundle the user reads: reading them as root
// would hand the user any file on the host (/etc/shadow). The read happens on a thread of its own
// whose fsuid, fsgid and groups are the user's; Linux keeps credentials per thread, and the thread
// is never given back to the Go scheduler (the goroutine exits locked, so the runtime ends it).
func readFileAs(path string, cred *syscall.Credential) ([]byte, error) {
	if cred == nil {
		return readRegular(path)
	}
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread dies with the goroutine
		groups := []int{int(cred.Gid)}
		for _, g := range cred.Groups {
			groups = append(groups, int(g))
		}
		// x/sys/unix changes this thread only (syscall.Setgroups would change every thread).
		if err := unix.Setgroups(groups); err != nil {
			ch <- result{err: fmt.Errorf("setgroups: %w", err)}
			return
		}
		unix.SetfsgidRetGid(int(cred.Gid))
		unix.SetfsuidRetUid(int(cred.Uid))
		// setfs[ug]id report no error: an invalid id (-1) reads back the current value.
		fsgid, _ := unix.SetfsgidRetGid(-1)
		fsuid, _ := unix.SetfsuidRetUid(-1)
		if fsuid != int(cred.Uid) || fsgid != int(cred.Gid) {
			ch <- result{err: fmt.Errorf("could not take uid %d gid %d to read %s", cred.Uid, cred.Gid, path)}
			return
		}
		b, err := readRegular(path)
		ch <- result{b, err}
	}()
	r := <-ch
	return r.b, r.err
}

// readRegular reads a regular file of bounded size (never a FIFO or a device).
func readRegular(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() > maxTrustInput {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxTrustInput)
	}
	return io.ReadAll(io.LimitReader(f, maxTrustInput))
}

// newTrustDir creates the directory for the command's trust bundle: fresh, mode 0700 and, when the
// command runs as another user (cred), owned by that user so it can read what is inside. The files
// are written through the returned os.Root (no path in it can be redirected by a symlink) before
// the directory is handed over. Under /tmp when the user changes (TMPDIR may be the user's).
func newTrustDir(cred *syscall.Credential) (string, *os.Root, error) {
	parent := ""
	if cred != nil {
		parent = "/tmp"
		st, err := os.Lstat(parent)
		if err != nil {
			return "", nil, fmt.Errorf("trust bundle: %w", err)
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !st.IsDir() || !ok || sys.Uid != 0 || (st.Mode()&0o002 != 0 && st.Mode()&os.ModeSticky == 0) {
			return "", nil, fmt.Errorf("trust bundle: %s is not a root-owned directory that others cannot tamper with", parent)
		}
	}
	dir, err := os.MkdirTemp(parent, "mcpintercept-exec-")
	if err != nil {
		return "", nil, fmt.Errorf("trust bundle: %w", err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("trust bundle: %w", err)
	}
	// What we opened is what MkdirTemp made: ours, 0700, empty.
	st, err := r.Stat(".")
	if err == nil {
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok || int(sys.Uid) != os.Geteuid() || st.Mode().Perm() != 0o700 {
			err = fmt.Errorf("%s changed under us", dir)
		}
	}
	if err != nil {
		r.Close()
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("trust bundle: %w", err)
	}
	return dir, r, nil
}

// writeTrustFile writes name in the trust directory, readable by everyone who can enter it (0644
// regardless of umask).
func writeTrustFile(r *os.Root, name string, data []byte) error {
	if err := r.WriteFile(name, data, 0o644); err != nil {
		return err
	}
	return r.Chmod(name, 0o644)
}

// handOver gives the trust directory to the command's user (a no-op when it runs as exec itself).
func handOver(r *os.Root, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	d, err := r.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Chown(int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("chown %s: %w", filepath.Base(r.Name()), err)
	}
	return nil
}
