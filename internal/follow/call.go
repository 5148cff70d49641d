package follow

import "errors"

// CallError names the daemon call that failed.
type CallError struct {
	Call string
	Err  error
}

func (e *CallError) Error() string { return e.Call + ": " + e.Err.Error() }
func (e *CallError) Unwrap() error { return e.Err }

// WrapCall names the call that returned err; nil stays nil.
func WrapCall(call string, err error) error {
	if err == nil {
		return nil
	}
	return &CallError{Call: call, Err: err}
}

// Call splits err into the call WrapCall named ("" if none) and the call's
// own error (err itself if no call was named).
func Call(err error) (call string, cause error) {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.Call, ce.Err
	}
	return "", err
}
