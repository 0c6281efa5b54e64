package nodeagent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// stateFile is the agent's record of its enrolled pods, so that a restarted agent adopts them
// (their steering checked and reinstalled in place, never duplicated).
const stateFile = "pods.json"

// statePod is one enrolled pod as the state file keeps it.
type statePod struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	UID         string `json:"uid,omitempty"`
	Netns       string `json:"netns"`
	ContainerID string `json:"container_id,omitempty"`
}

type state struct {
	Version int        `json:"version"`
	Pods    []statePod `json:"pods"`
}

func loadState(dir string) ([]statePod, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("state %s: %w", filepath.Join(dir, stateFile), err)
	}
	if s.Version != 1 {
		return nil, fmt.Errorf("state %s: version %d, want 1", filepath.Join(dir, stateFile), s.Version)
	}
	return s.Pods, nil
}

// saveState writes pods atomically (temp file, fsync, rename), 0600 in a 0700 directory.
func saveState(dir string, pods []statePod) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	slices.SortFunc(pods, func(a, b statePod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	b, err := json.MarshalIndent(state{Version: 1, Pods: pods}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".pods-*.json")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, stateFile)); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}
