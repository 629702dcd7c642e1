"""One function run eagerly and scripted under the same bf16 autocast. Its
inner fp16 region is honoured eagerly but inert in TorchScript (no JIT
autocast), so the mm line casts to fp16 eagerly and to bf16 when scripted:
the sites view shows the two modes side by side, differing."""
import torch


def project(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.float16):
        h = torch.mm(a, b)  # castscope-ui: the mismatching line
    return h + h


scripted = torch.jit.script(project)
a, b = torch.randn(8, 8), torch.randn(8, 8)
with torch.autocast("cpu", dtype=torch.bfloat16):
    for _ in range(3):
        eager_out = project(a, b)
        script_out = scripted(a, b)
print("script_vs_eager:", eager_out.dtype, script_out.dtype, flush=True)
