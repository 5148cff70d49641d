// Package setting is the error that names the setting it is about, so
// that a caller (the Caddyfile adapter, a JSON user with errors.As) learns
// which setting is at fault from the error's fields, never from its text.
package setting

import "fmt"

// Error is an error about a setting, or about its combination with
// others. Its text is "<setting>: <Err>".
type Error struct {
	// Setting is the setting at fault, as the Caddyfile and the JSON
	// spell it; one in a block is the block's name, a space, and its own:
	// "tls ca".
	Setting string
	// Also are the other settings whose combination with Setting is at
	// fault, e.g. "address" for a token refused with a unix socket
	// address. The Caddyfile points at the latest in the block of Setting
	// and these.
	Also []string
	// Err says what is wrong; it does not repeat the setting's name.
	Err error
}

// Error returns "<setting>: <what is wrong>".
func (e *Error) Error() string { return e.Setting + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an Error about setting, its Err formatted as by
// fmt.Errorf (%w wraps).
func Errorf(setting, format string, args ...any) error {
	return &Error{Setting: setting, Err: fmt.Errorf(format, args...)}
}

// Wrap returns err as an Error about setting; nil stays nil.
func Wrap(setting string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Setting: setting, Err: err}
}

// With returns an Error about setting in combination with also, its Err
// formatted as by fmt.Errorf.
func With(setting string, also []string, format string, args ...any) error {
	return &Error{Setting: setting, Also: also, Err: fmt.Errorf(format, args...)}
}
