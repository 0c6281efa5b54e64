// Package pki creates, loads and exports the appliance CA and mints short-lived per-name leaf
// certificates with a bounded cache. It knows nothing about connections.
//
// The CA lives in a directory as ca.pem (0644) and ca-key.pem (0600): Load refuses a key that
// group or others can read, that another user owns or that is a symbolic link, and a directory
// that group or others can write or that another user owns, since whoever copies or replaces the
// key can impersonate every server the clients reach through the appliance. Creation (Init, and
// LoadOrInit on first start) holds an flock on the directory's .lock file and stages both files
// before renaming them in, certificate last, so concurrent or interrupted creations leave one
// consistent pair. Leaves get a fresh key each, live a day by default and are
// re-minted an hour before they expire, so a leaked leaf is worth little. Key material is never
// printed, logged or marshalled by this package's types.
package pki
