"""What bracketing every nn.Module call costs (the precision map's module
hooks, castscope/module_scopes.py), per module call, side by side in one run.
A Sequential of 10 Identity modules is called on a 1-element tensor: 11
module calls and no op, so each row's time per call is the hook path's.
Rows, interleaved within each repeat:
  native                  no global module hook
  noop-global-hooks       two global hooks that do nothing (a pre-hook and an
                          always-called forward hook): torch's own slow path
  castscope               castscope attached: its module hooks
  castscope-no-modules    castscope attached with module_scopes=False

    .venv/bin/python bench/module_hook_bench.py [--calls 20000] [--repeats 7]
"""
import contextlib
import tempfile
import time

import torch

import castscope
from harness import interleaved, medians, repeats_parser

MODULES = 11  # the Sequential and its 10 children


@contextlib.contextmanager
def noop_global_hooks():
    module = torch.nn.modules.module
    pre = module.register_module_forward_pre_hook(lambda m, args: None)
    post = module.register_module_forward_hook(lambda m, args, out: None, always_call=True)
    try:
        yield
    finally:
        pre.remove()
        post.remove()


def main():
    args = repeats_parser(7, calls=20000).parse_args()
    model = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(10)])
    x = torch.randn(1)

    def per_call_us(context) -> float:
        with context():
            for _ in range(100):
                model(x)
            start = time.perf_counter()
            for _ in range(args.calls):
                model(x)
            return (time.perf_counter() - start) / args.calls / MODULES * 1e6

    with tempfile.TemporaryDirectory() as tmp:
        def attached(**options):
            return lambda: castscope.attached(events_path=f"{tmp}/e.jsonl", probe=False, numerics=False, **options)
        rows = {
            "native": contextlib.nullcontext,
            "noop-global-hooks": noop_global_hooks,
            "castscope": attached(),
            "castscope-no-modules": attached(module_scopes=False),
        }
        median = medians(interleaved(rows, args.repeats, lambda row: per_call_us(rows[row])))
    print(f"torch {torch.__version__}, per module call, median of {args.repeats} interleaved runs of "
          f"{args.calls} calls of {MODULES} modules")
    print(f"{'row':22s} {'us/call':>8s} {'x native':>9s} {'+us over native':>16s}")
    for row, value in median.items():
        print(f"{row:22s} {value:8.2f} {value / median['native']:8.2f}x {value - median['native']:15.2f}")


if __name__ == "__main__":
    main()
