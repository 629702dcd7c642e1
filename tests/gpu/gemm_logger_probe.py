"""On a GPU machine: what cuBLASLt's logger and cuBLAS's logger report for the
GEMMs torch runs, and which kernels ran, per case (docs/gpu.md, "GEMM
precision"). Loads the libraries torch already loaded (RTLD_NOLOAD first), so
the loggers are those of torch's cuBLAS. Prints, per case, the messages by
function (the first few in full) and the kernels torch.profiler saw."""
import collections
import ctypes
import glob
import os
import sys

import torch

MAX_SHOWN = int(os.environ.get("PROBE_SHOWN", "3"))
RTLD_NOLOAD = 4


def load(pattern: str) -> ctypes.CDLL:
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu13", "lib")
    for name in [pattern] + sorted(glob.glob(os.path.join(lib_dir, pattern + "*"))):
        try:
            return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL | RTLD_NOLOAD)
        except OSError:
            continue
    return ctypes.CDLL(sorted(glob.glob(os.path.join(lib_dir, pattern + "*")))[0])


messages = collections.defaultdict(list)
LT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p)
CUBLAS_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)


@LT_CALLBACK
def on_lt(level, function, message):
    messages[("lt", level, function.decode())].append(message.decode(errors="replace"))


@CUBLAS_CALLBACK
def on_cublas(message):
    text = message.decode(errors="replace")
    messages[("cublas", 0, text.split("(")[0][-40:])].append(text)


a = torch.randn(256, 256, device="cuda")
(a @ a).sum().item()  # loads cuBLAS
lt = load("libcublasLt.so")
cublas = load("libcublas.so")
print("cublasLt:", lt._name, "cublas:", cublas._name)
mask = int(os.environ.get("PROBE_LT_MASK", "31"))
print("cublasLtLoggerSetCallback ->", lt.cublasLtLoggerSetCallback(on_lt))
print("cublasLtLoggerSetMask", mask, "->", lt.cublasLtLoggerSetMask(mask))
if os.environ.get("PROBE_CUBLAS", "1") == "1":
    print("cublasLoggerConfigure ->", cublas.cublasLoggerConfigure(1, 0, 0, None))
    print("cublasSetLoggerCallback ->", cublas.cublasSetLoggerCallback(on_cublas))

x32 = torch.randn(512, 1024, device="cuda")
w32 = torch.randn(768, 1024, device="cuda")
b32 = torch.randn(768, device="cuda")
img = torch.randn(8, 64, 56, 56, device="cuda")
conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
bx = torch.randn(16, 128, 64, device="cuda")
by = torch.randn(16, 64, 128, device="cuda")


def case(name, fn):
    messages.clear()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = collections.Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    print(f"\n=== {name}")
    for key, texts in messages.items():
        print(f"  [{key[0]} level {key[1]}] {key[2]}: {len(texts)} message(s)")
        for text in texts[:MAX_SHOWN]:
            print("     ", text[:1500])
    for kernel, count in kernels.items():
        print(f"  kernel x{count}: {kernel[:300]}")


torch.backends.cuda.matmul.allow_tf32 = False
case("fp32 mm, tf32 off", lambda: x32 @ w32.t())
case("fp32 linear+bias, tf32 off", lambda: torch.nn.functional.linear(x32, w32, b32))
torch.backends.cuda.matmul.allow_tf32 = True
case("fp32 mm, tf32 on", lambda: x32 @ w32.t())
case("fp32 linear+bias, tf32 on", lambda: torch.nn.functional.linear(x32, w32, b32))
torch.backends.cuda.matmul.allow_tf32 = False
with torch.autocast("cuda", dtype=torch.bfloat16):
    case("autocast bf16 linear+bias", lambda: torch.nn.functional.linear(x32, w32, b32))
    case("autocast bf16 bmm", lambda: torch.bmm(bx, by))
    case("autocast bf16 conv2d", lambda: conv(img))
with torch.autocast("cuda", dtype=torch.float16):
    case("autocast fp16 mm", lambda: x32 @ w32.t())
    case("autocast fp16 linear backward", lambda: torch.nn.functional.linear(x32.requires_grad_(), w32, b32).sum().backward())
torch.backends.cudnn.allow_tf32 = True
case("fp32 conv2d, cudnn tf32 on", lambda: conv(img))
print("\ntorch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())
sys.stdout.flush()
