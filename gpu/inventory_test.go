package gpu

import (
	"errors"
	"strings"
	"testing"
)

func TestFake(t *testing.T) {
	f := NewFake(Device{Index: 0, UUID: "GPU-a", TotalMiB: 8192, FreeMiB: 8000})
	devs, err := f.Devices()
	if err != nil || len(devs) != 1 || devs[0].FreeMiB != 8000 {
		t.Fatalf("Devices = %v, %v", devs, err)
	}
	devs[0].FreeMiB = 1 // a copy: the Fake must not change
	if again, _ := f.Devices(); again[0].FreeMiB != 8000 {
		t.Fatal("Devices returned the Fake's own slice")
	}
	f.SetErr(noGPU("test"))
	if _, err := f.Devices(); !errors.Is(err, ErrNoGPU) {
		t.Fatalf("after SetErr: %v", err)
	}
	f.SetErr(nil)
	f.Set()
	if devs, err := f.Devices(); err != nil || len(devs) != 0 {
		t.Fatalf("after Set(): %v, %v", devs, err)
	}
}

func TestStatic(t *testing.T) {
	devs, err := Static(24576).Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := Device{Index: 0, UUID: "static-0", Name: "declared VRAM", TotalMiB: 24576, FreeMiB: 24576}
	if len(devs) != 1 || devs[0] != want {
		t.Fatalf("Static(24576) = %+v, want [%+v]", devs, want)
	}
}

func TestNoGPUError(t *testing.T) {
	err := noGPU("libnvidia-ml.so.1 not found")
	if !errors.Is(err, ErrNoGPU) {
		t.Fatal("NoGPUError does not match ErrNoGPU")
	}
	if got, want := err.Error(), "no NVIDIA GPU: libnvidia-ml.so.1 not found"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

type problemFake struct {
	*Fake
	problems []DeviceProblem
}

func (p problemFake) Problems() []DeviceProblem { return p.problems }

func TestDescribe(t *testing.T) {
	two := NewFake(
		Device{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA GeForce RTX 4090", TotalMiB: 24564, UsedMiB: 1024, FreeMiB: 23540},
		Device{Index: 1, UUID: "GPU-bbbb", Name: "NVIDIA RTX A4000", TotalMiB: 16376, UsedMiB: 376, FreeMiB: 16000},
	)
	failing := NewFake()
	failing.SetErr(errors.New("nvml: boom"))
	noGPUFake := NewFake()
	noGPUFake.SetErr(noGPU("NVML library libnvidia-ml.so.1 not found"))

	tests := []struct {
		name string
		inv  Inventory
		want []string
	}{
		{"two devices", two, []string{
			"GPU 0: NVIDIA GeForce RTX 4090 (GPU-aaaa)\n  memory: 24564 MiB total, 1024 MiB used, 23540 MiB free\n",
			"GPU 1: NVIDIA RTX A4000 (GPU-bbbb)\n  memory: 16376 MiB total, 376 MiB used, 16000 MiB free\n",
			"total: 2 devices, 40940 MiB total, 1400 MiB used, 39540 MiB free\n",
		}},
		{"no GPU", noGPUFake, []string{"no NVIDIA GPU (NVML library libnvidia-ml.so.1 not found)\n"}},
		{"inventory error", failing, []string{"GPU inventory failed: nvml: boom\n"}},
		{"static", Static(8192), []string{"GPU 0: declared VRAM (static-0)", "total: 1 device, 8192 MiB total, 0 MiB used, 8192 MiB free\n"}},
		{"skipped device", problemFake{Fake: NewFake(Device{Index: 0, Name: "A", TotalMiB: 10, FreeMiB: 10}),
			problems: []DeviceProblem{{Index: 1, Reason: "get memory info: ERROR_GPU_IS_LOST"}}},
			[]string{"GPU 1: skipped (get memory info: ERROR_GPU_IS_LOST)\n", "total: 1 device,"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Describe(tt.inv)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Describe output lacks %q; got:\n%s", w, got)
				}
			}
		})
	}
}
