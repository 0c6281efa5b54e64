package cniproto

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The spool holds the ADDs the plugin could not deliver while the agent was down, one file per
// pod: the agent enrols them when it starts, then removes each file (RemoveSpool). A DEL while
// the agent is down removes its pod's pending ADD.

const (
	spoolExt       = ".json"
	spoolTmpPrefix = ".tmp-"
	maxSpoolName   = 200 // well below NAME_MAX (255) with the prefix and extension
)

// SpoolName is the file name of req's pod in the spool: "uid-<uid>.json", or
// "pod-<namespace>_<name>.json" without a UID ('_' appears in neither part, so the two never
// collide), or "sha-<hex>.json" when a part has a character unsafe in a file name or the name
// would be too long.
func SpoolName(req Request) string {
	prefix, key := "uid-", req.Pod.UID
	if key == "" {
		prefix, key = "pod-", req.Pod.Namespace+"_"+req.Pod.Name
	}
	if len(key) > maxSpoolName || !safeName(key) {
		sum := sha256.Sum256([]byte(prefix + key))
		return "sha-" + hex.EncodeToString(sum[:]) + spoolExt
	}
	return prefix + key + spoolExt
}

func safeName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' && i > 0) {
			return false
		}
	}
	return s != ""
}

// WriteSpool records an undelivered ADD: a temp file in dir, synced, renamed over the pod's file
// (an earlier ADD of the same pod, from an older sandbox, is replaced), 0600. The directory is
// created 0700 when missing.
func WriteSpool(dir string, req Request) error {
	if req.Version == 0 {
		req.Version = Version
	}
	if req.Command != CmdAdd {
		return fmt.Errorf("spool: only ADD is spooled, not %q", bounded(req.Command))
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	b, err := encodeLine(req)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	f, err := os.CreateTemp(dir, spoolTmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename this is a no-op
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("spool: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("spool: write: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("spool: sync: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, SpoolName(req))); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	syncDir(dir)
	return nil
}

// syncDir makes a rename or removal durable; best effort (the spool lives on tmpfs by default,
// where there is nothing to sync).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// ReadSpool returns every valid spooled request, in file name order. A file that cannot be read
// or decoded is named in the returned error and skipped: it never hides the others. A missing
// directory is an empty spool. Temp files of a write in progress (or interrupted) are ignored.
func ReadSpool(dir string) ([]Request, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	var reqs []Request
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, spoolTmpPrefix) || !strings.HasSuffix(name, spoolExt) {
			continue
		}
		if !e.Type().IsRegular() {
			errs = append(errs, fmt.Errorf("spool %s: not a regular file", name))
			continue
		}
		req, err := readSpoolFile(filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, fmt.Errorf("spool %s: %w", name, err))
			continue
		}
		reqs = append(reqs, req)
	}
	return reqs, errors.Join(errs...)
}

func readSpoolFile(path string) (Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return Request{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxMessageBytes+1))
	if err != nil {
		return Request{}, err
	}
	req, err := DecodeRequest(b)
	if err != nil {
		return Request{}, err
	}
	if req.Command != CmdAdd {
		return Request{}, fmt.Errorf("spooled command is %s, not ADD", req.Command)
	}
	return req, nil
}

// RemoveSpool removes req's pod's spooled ADD; removing what is not there is no error. When req
// names a container, only an ADD of that container is removed: a late DEL of a pod's old sandbox
// must not drop the pending ADD of its new one.
func RemoveSpool(dir string, req Request) error {
	path := filepath.Join(dir, SpoolName(req))
	if req.ContainerID != "" {
		old, err := readSpoolFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		// An unreadable file is removed all the same: it can only be a stale ADD of this pod.
		if err == nil && old.ContainerID != req.ContainerID {
			return nil
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("spool: %w", err)
	}
	syncDir(dir)
	return nil
}
