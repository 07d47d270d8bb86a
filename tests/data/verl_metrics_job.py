"""A stand-in GRPO job for tools.watch tests: prints what verl 0.6.1 prints, then holds or exits.

Line formats from the installed verl package: verl/utils/logger/aggregate_logger.py
concat_dict_to_str (`step:N` then ` - key:pprint.pformat(value)` for numeric values, numpy scalars
included, so validation values read `np.float64(...)`), verl/trainer/ppo/ray_trainer.py
("Total training steps: N", the initial validation logged at step 0). Actor output reaches the
driver's log with Ray's `(TaskRunner pid=..., ip=...)` prefix.

    python verl_metrics_job.py STEPS TOTAL HOLD_SECONDS [EXIT_CODE]
"""

import sys
import time

steps, total, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
code = int(sys.argv[4]) if len(sys.argv) > 4 else 0
prefix = "(TaskRunner pid=4242, ip=10.0.0.5) "
print(f"{prefix}Size of train dataloader: {total // 2}, Size of val dataloader: 1")
print(f"{prefix}Total training steps: {total}")
print(f"{prefix}step:0 - val-core/openai/gsm8k/reward/mean@1:np.float64(0.12) - "
      "val-aux/openai/gsm8k/reward/std@1:np.float64(0.3)")
for step in range(1, steps + 1):
    score = 0.1 + 0.05 * step  # a rising curve the test can check point by point
    print(f"{prefix}step:{step} - training/global_step:{step} - training/epoch:0 - "
          f"critic/score/mean:{score:.4f} - critic/score/max:1.0 - actor/lr:1e-06 - "
          f"timing_s/step:30.0 - perf/throughput:1234.5")
    if step % 3 == 0:
        print(f"{prefix}step:{step} - val-core/openai/gsm8k/reward/mean@1:np.float64({score + 0.02:.4f})")
    print(f"{prefix}Training Progress: {step}/{total} [00:{step:02d}<00:10]")  # tqdm noise
sys.stdout.flush()
time.sleep(hold)
sys.exit(code)
