package audit

import (
	"fmt"
	"path/filepath"
	"time"
)

// checkpointLoop signs the head every CheckpointEvery when it moved.
func (s *Store) checkpointLoop() {
	defer close(s.cpDone)
	tick := time.NewTicker(s.cfg.CheckpointEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := s.checkpoint(); err != nil {
				s.log.Warn("audit checkpoint not written", "err", err)
			}
		case <-s.cpStop:
			return
		}
	}
}

// checkpoint signs the durable head and the start unless the latest
// persisted checkpoint already names both, then writes it as the checkpoint file and appends it to
// checkpoints.log. The signed note is served even when writing it fails, so
// it can still be shipped off the box.
func (s *Store) checkpoint() error {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	s.state.Lock()
	h, done, st, doneSt := s.current, s.cpHead, s.start, s.cpStart
	haveCP := s.cp != nil
	s.state.Unlock()
	if haveCP && h == done && st == doneSt {
		return nil
	}
	msg, err := signCheckpoint(s.signer, h, st, time.Now())
	if err != nil {
		return err
	}
	s.state.Lock()
	s.cp = msg
	s.state.Unlock()
	if err := writeAtomic(filepath.Join(s.cfg.Dir, checkpointFile), msg, 0o644); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := appendSynced(filepath.Join(s.cfg.Dir, checkpointsLog), append(msg, '\n')); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	s.state.Lock()
	s.cpHead, s.cpStart = h, st
	s.state.Unlock()
	return nil
}
