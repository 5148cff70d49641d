package setting

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestError(t *testing.T) {
	err := fmt.Errorf("provision: %w", Errorf("tls ca", "reading: %w", fs.ErrNotExist))
	if err.Error() != "provision: tls ca: reading: file does not exist" {
		t.Errorf("text %q", err)
	}
	var se *Error
	if !errors.As(err, &se) || se.Setting != "tls ca" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.As/Is through the chain: %+v", se)
	}
	combo := With("token", []string{"address"}, "not allowed with a unix socket address %q", "unix:///a.sock")
	if !errors.As(combo, &se) || se.Setting != "token" || len(se.Also) != 1 || se.Also[0] != "address" {
		t.Errorf("With: %+v", se)
	}
	if Wrap("token", nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
}
