//go:build !cgo

package gpu

import (
	"errors"
	"testing"
)

func TestOpenNVMLWithoutCgo(t *testing.T) {
	inv, err := OpenNVML()
	if inv != nil || !errors.Is(err, ErrNoGPU) {
		t.Fatalf("OpenNVML = %v, %v; want nil, ErrNoGPU", inv, err)
	}
}
