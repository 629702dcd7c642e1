"""A job whose agent has a ring for one thread only (max_threads=1): the
main thread's autocast work is recorded, then a second thread's 100 autocast
mm calls are dropped (it has no ring), then the main thread works again. The
pauses either side put the drops in batches of their own, between the main
thread's events before and after the thread."""
import json
import os
import threading
import time

# castscope run hands the agent its configuration in CASTSCOPE_CONFIG, read
# when torch is imported: one more setting before that import.
config = json.loads(os.environ["CASTSCOPE_CONFIG"])
config["max_threads"] = 1
os.environ["CASTSCOPE_CONFIG"] = json.dumps(config)

import torch  # noqa: E402

a, b = torch.randn(8, 8), torch.randn(8, 8)


def work(n):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(n):
            torch.mm(a, b)


work(100)  # castscope-ui: before the thread
time.sleep(1.0)
thread = threading.Thread(target=work, args=(100,))
thread.start()
thread.join()
time.sleep(1.0)
work(100)  # castscope-ui: after the thread
print("lossy_train: done", flush=True)
