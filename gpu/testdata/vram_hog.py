# Takes $HOG_MIB MiB of GPU memory, says "ready", and holds it until killed:
# the other process of TestRealNVMLSeesOtherProcesses (needs PyTorch with CUDA).
#
#   KITH_REAL_NVML=1 KITH_REAL_NVML_HOG='exec python3 testdata/vram_hog.py' \
#     go test -run RealNVMLSeesOther -v ./gpu
import os, time, torch
x = torch.empty(int(os.environ["HOG_MIB"]) << 20, dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(3600)
