"""Attaching leaves the job's malloc arena as it was: the agent's start makes
its long-lived allocations on a thread of its own, in another glibc arena
(agent/src/runtime/own_arena_thread.h says why: made in the job's arena they
changed what its ops' allocations cost, docs/performance.md "thirteenth pass").
Measured in a fresh process with glibc's malloc_info, around the agent's
start call alone."""
import json
import os
import subprocess
import sys
import textwrap

JOB = textwrap.dedent("""
    import ctypes, json, re, sys, tempfile
    import torch
    import castscope
    from castscope import _native

    libc = ctypes.CDLL("libc.so.6")
    libc.open_memstream.restype = ctypes.c_void_p
    libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_size_t)]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    libc.free.argtypes = [ctypes.c_void_p]

    def in_use_by_arena():
        # {arena number: bytes in use}: what the arena took from the system less its free chunks.
        text, size = ctypes.c_char_p(), ctypes.c_size_t()
        stream = libc.open_memstream(ctypes.byref(text), ctypes.byref(size))
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        xml = ctypes.string_at(text).decode()
        libc.free(ctypes.cast(text, ctypes.c_void_p))
        arenas = {}
        for heap in re.finditer(r'<heap nr="(\\d+)">(.*?)</heap>', xml, re.S):
            body = heap.group(2)
            system = int(re.search(r'<system type="current" size="(\\d+)"/>', body).group(1))
            free = sum(int(n) for n in re.findall(r'<total type="(?:fast|rest)" count="\\d+" size="(\\d+)"/>', body))
            arenas[int(heap.group(1))] = system - free
        return arenas

    lib = _native._library()
    start = lib.castscope_agent_start
    measured = {}

    class MeasuredStart:
        def __call__(self, *args):
            measured["before"] = in_use_by_arena()
            status = start(*args)
            measured["after"] = in_use_by_arena()
            return status

    lib.castscope_agent_start = MeasuredStart()
    with castscope.attached(events_path=tempfile.mkdtemp() + "/events.jsonl", probe=False, numerics=False):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.mm(torch.randn(8, 8), torch.randn(8, 8)).dtype == torch.bfloat16
    before, after = measured["before"], measured["after"]
    print(json.dumps({"main": after[0] - before[0],
                      "others": sum(after.get(n, 0) - before.get(n, 0) for n in after if n != 0)}))
""")


def test_attaching_leaves_the_jobs_malloc_arena_as_it_was():
    # glibc's own allocator with its default arenas: one arena for all
    # (MALLOC_ARENA_MAX=1, a tunable) would be shared, and a preloaded
    # allocator (jemalloc, tcmalloc) has no glibc arenas to measure.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_ARENA") and k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
    done = subprocess.run([sys.executable, "-c", JOB], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    grown = json.loads(done.stdout.strip().splitlines()[-1])
    # Starting allocates hundreds of KiB (policies, tables, registrations;
    # ~380 KB with the shipped policies): in another arena.
    assert grown["others"] > 64 * 1024, grown
    # The job's (main) arena: a few KiB at most (the call's own), not the agent's.
    assert grown["main"] < 32 * 1024, grown
    assert grown["others"] > 8 * grown["main"], grown
