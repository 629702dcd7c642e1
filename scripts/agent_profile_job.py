"""The job scripts/setup.sh runs under the instrumented agent to take the
profile of a profile-guided build (cmake/CastscopeProfileGuided.cmake).

What a training step does at the autocast kernels, a few seconds of it on the
CPU: the per-op bench's ops (mm, linear and conv2d, with and without their
optional bias, addmm) under no_grad, then SGD steps of a small MLP (the cast
cache serving parameter casts, the backward), each with every event recorded
and in aggregate mode. The probe, numerics and GPU timing windows stay off:
their paths are the exception, and a profile that counts them hot would lay
the steady state out around them.

    CASTSCOPE_AGENT_LIB=build/agent/libcastscope_agent.so .venv/bin/python scripts/agent_profile_job.py
"""
import tempfile

import torch
import torch.nn.functional as F

import castscope


def ops_under_no_grad(rounds):
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    x, w, bias = torch.randn(4, 16), torch.randn(16, 16), torch.randn(16)
    image, kernel, kernel_bias = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(rounds):
            torch.mm(a, b)
            F.linear(x, w, bias)
            F.linear(x, w)
            F.conv2d(image, kernel, kernel_bias)
            F.conv2d(image, kernel)
            torch.addmm(bias, x, w)


def training_steps(steps):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data, target = torch.randn(64, 16), torch.randn(64, 4)
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(data).float(), target)
        loss.backward()
        optimizer.step()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for aggregate in (False, True):
            with castscope.attached(events_path=f"{tmp}/events.jsonl", probe=False, numerics=False,
                                    gpu_timing="off", aggregate=aggregate) as agent:
                ops_under_no_grad(400)
                training_steps(100)
                agent.flush()
                recorded = agent.status()["events_recorded"]
            if recorded == 0:
                raise SystemExit(f"agent_profile_job: the agent recorded nothing (aggregate={aggregate})")


if __name__ == "__main__":
    main()
