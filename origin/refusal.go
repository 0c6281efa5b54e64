package origin

import "errors"

// Refusal is a flow or an upstream dial refused on purpose — the destination is in the deny
// list, a VIP no name holds, an SNI that is not the name behind the VIP, a loop to the
// appliance's own listener — rather than one that failed. Reason is what the flow record says;
// Err says why in words (and may carry details a caller reads with errors.As).
type Refusal struct {
	Reason string
	Err    error
}

// Refuse returns a *Refusal for reason with err as its cause.
func Refuse(reason string, err error) *Refusal { return &Refusal{Reason: reason, Err: err} }

func (r *Refusal) Error() string { return r.Err.Error() }

// Unwrap returns the cause.
func (r *Refusal) Unwrap() error { return r.Err }

// RefuseReason names the refusal for a flow record.
func (r *Refusal) RefuseReason() string { return r.Reason }

// IsRefusal reports whether err is (or wraps) a Refusal, and which.
func IsRefusal(err error) (*Refusal, bool) {
	var r *Refusal
	ok := errors.As(err, &r)
	return r, ok
}
